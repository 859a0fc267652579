"""The typer application and what every command shares: reading EXPR, options, errors.

The CLI is a thin adapter: commands parse options, call the library, hand plain results to a
renderer, and turn a `GradcliError` into its message on stderr and exit status 2.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Annotated, Any, Callable, List, Optional, TypeVar

import typer

from .. import limits
from ..interpret import constructors
from ..errors import GradcliError

F = TypeVar("F", bound=Callable[..., Any])

app = typer.Typer(
    name="gradcli",
    help=(
        "Inspect and check PyTorch autograd from the shell.\n\n"
        "Examples:\n\n"
        "  gradcli demo swish\n\n"
        "  gradcli trace \"x.pow(2).sum()\" --var \"x=randn(3,3)\"\n\n"
        "  gradcli check \"x*sigmoid(x)\" --order 2\n\n"
        "  gradcli list"
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"gradcli {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print gradcli's version and exit.")] = False,
) -> None:
    """Exit status: 0 all agreed, 1 a problem was found (a wrong or non-finite gradient, an
    autograd error), 2 bad input or usage."""


def reports_errors(command: F) -> F:
    """Turn a GradcliError into its one-paragraph message on stderr and exit status 2."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except GradcliError as err:
            typer.echo(err.render(), err=True)
            raise typer.Exit(EXIT_USAGE) from None
        except (MemoryError, RuntimeError) as err:
            # A cap on the address space (ulimit -v) or a full machine: a message, not a traceback.
            if not limits.is_out_of_memory(err):
                raise
            typer.echo(limits.out_of_memory().render(), err=True)
            raise typer.Exit(EXIT_USAGE) from None
        except ImportError as err:
            if "torch" not in f"{err} {err.name}" or "torch._C" in sys.modules and _torch_loaded():
                raise
            typer.echo(limits.torch_unavailable(err).render(), err=True)
            raise typer.Exit(EXIT_USAGE) from None

    return wrapper  # type: ignore[return-value]


def _torch_loaded() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and hasattr(torch, "_C")


def read_expression(expr: str) -> str:
    """EXPR as given, or the text of `@FILE`, or stdin for `-`."""
    from ..reading import read_capped, read_file

    if expr == "-":
        return read_capped(getattr(sys.stdin, "buffer", sys.stdin), "the expression from stdin")
    if expr.startswith("@"):
        return read_file(Path(expr[1:]), f"the expression file '{expr[1:]}'", pipes=True)
    return expr


# Options several commands share, declared once.
VarOption = Annotated[
    Optional[List[str]],
    typer.Option(
        "--var", "-v", metavar="NAME=SPEC",
        help=f"A variable's value: 1.5, [1,2,3], {constructors.described()}. Repeatable.",
    ),
]
SeedOption = Annotated[Optional[int], typer.Option("--seed", help=f"Seed for {constructors.random_names()} (printed when not given).")]
DtypeOption = Annotated[Optional[str], typer.Option(
    "--dtype", metavar="DTYPE",
    help="float64, float32, float16 or bfloat16: an expression's values (default float64); a model and its inputs, "
    "converted (default: the model's own); with compare, the candidate's weights and inputs (bfloat16 or float16).")]
PlotOption = Annotated[Optional[str], typer.Option(
    "--plot", metavar="PATH",
    help="Also draw the command's picture (below) to PATH: .png, .svg or .pdf (needs matplotlib: pip install 'gradcli[plot]').")]
DeviceOption = Annotated[str, typer.Option("--device", help="Torch device, e.g. cpu (default) or cuda.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout, nothing else.")]
# The model block: how grads, memory, compare (and trace, check-function on a model) name the
# model, make it and reduce its output, declared once (docs/cli.md, "The model options").
TargetArgument = Annotated[str, typer.Argument(
    metavar="TARGET",
    help="Your model: path/to/model.py:NAME or package.module:NAME (importing it runs it, as python would).")]
InitOption = Annotated[Optional[List[str]], typer.Option(
    "--init", metavar="KEY=VALUE",
    help="A model target: a keyword argument for the nn.Module class or model factory (a Python literal). Repeatable.")]
LossOption = Annotated[Optional[str], typer.Option(
    "--loss", metavar="LOSS",
    help="A model target: reduce the output to the loss. An expression in which out is the output as the model "
    "returned it (out.logits, out[0], out['loss']; used as a tensor: the output tensor, a tuple's first item), its "
    "tensors by name (out_1, a dict's keys) and the --var inputs are bound, e.g. 'cross_entropy(out.flatten(0, 1), "
    "y.flatten())'; or your own loss, path/loss.py:NAME or package.module:NAME: a function NAME(out, **vars) or an "
    "nn.Module loss class such as torch.nn:CrossEntropyLoss.")]
LossInitOption = Annotated[Optional[List[str]], typer.Option(
    "--loss-init", metavar="KEY=VALUE",
    help="A keyword argument for the nn.Module loss class --loss names (a Python literal), e.g. ignore_index=0. Repeatable.")]
LibraryOption = Annotated[
    Optional[List[Path]],
    typer.Option("--library", metavar="DIR", help="Another folder of *.toml library functions (also $GRADCLI_LIBRARY). Repeatable."),
]


def model_spec(target: str, var: Any = None, init: Any = None, loss: Any = None, loss_init: Any = None,
               seed: int | None = None, device: str = "cpu", dtype: str | None = None, library: Any = None) -> Any:
    """The model options as the one record every model-level command hands the library
    (targets/spec.py), built here, once, from what the command line said."""
    from ..targets.spec import ModelSpec

    return ModelSpec.of(target, var, init=init, loss=loss, loss_init=loss_init, seed=seed, device=device, dtype=dtype,
                        library_dirs=library)


def checked_plot(plot: str | None) -> None:
    """A wrong --plot suffix or missing matplotlib is a usage error before any work."""
    if plot is not None:
        from ..plot.mpl import picture_format, require_matplotlib

        picture_format(plot)
        require_matplotlib()
