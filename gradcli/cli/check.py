"""`gradcli check` and `gradcli check-function`: is this gradient right?"""

from __future__ import annotations

from typing import Annotated, Any, List, Optional

import typer

from .app import (
    DeviceOption,
    DtypeOption,
    InitOption,
    JsonOption,
    LibraryOption,
    SeedOption,
    VarOption,
    app,
    read_expression,
    reports_errors,
)


def _count(text: str) -> int:
    """A count as people write large ones: 10000000, 10_000_000 or 1e7 (a whole number)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise typer.BadParameter(f"'{text}' is not a whole number") from None
    if not value.is_integer():
        raise typer.BadParameter(f"'{text}' is not a whole number")
    if abs(value) >= 2**63:  # the limit's own message would print all of its digits
        raise typer.BadParameter(f"'{text}' is too large to count")
    return int(value)


OrderOption = Annotated[int, typer.Option("--order", help="1: first derivatives; 2: also second derivatives (mixed partials) and gradgradcheck.")]


@app.command("check")
@reports_errors
def check_command(
    expr: Annotated[Optional[str], typer.Argument(help="The expression (or @FILE, or - for stdin).", show_default=False)] = None,
    var: VarOption = None,
    points: Annotated[Optional[int], typer.Option("--points", parser=_count, metavar="N", help="Points drawn without --var (default 1000, plus 0, ±0.5, ±1, ±10, ±100, ±1000); 1e7 and 10_000_000 are read as 10,000,000.")] = None,
    order: OrderOption = 1,
    atol: Annotated[Optional[float], typer.Option("--atol", help="Absolute tolerance (default by dtype: 1e-10 for float64, 1e-6 float32).")] = None,
    rtol: Annotated[Optional[float], typer.Option("--rtol", help="Relative tolerance (default by dtype: 1e-7 for float64, 1e-4 float32).")] = None,
    dtype: DtypeOption = "float64",
    device: DeviceOption = "cpu",
    seed: SeedOption = None,
    library: LibraryOption = None,
    all_entries: Annotated[bool, typer.Option("--all", help="Check every entry of the expression library instead of EXPR.")] = False,
    json: JsonOption = False,
    fix: Annotated[bool, typer.Option("--fix", help="Print only the rewritten expression that passes the same check (exit 0), or say that no known rewrite does (exit 1).")] = False,
) -> None:
    """Check autograd against sympy's exact derivative and finite differences (gradcheck).

    Elementwise expressions (and a final sum/mean of one) are checked at every point, up to
    10^7; softmax, matmul and reductions over a dim exactly on small tensors (up to 32
    elements). Where autograd and the float64 formula disagree, 50-digit arithmetic decides.
    Points outside the domain and kinks (relu at 0) are counted, not compared. Without
    --var: the library entry's domain, else 1000 uniform draws from [-5, 5] plus special
    points. gradcheck runs in float64: slow mode up to 300 input elements, fast mode beyond,
    on at most 100,000 of the points. Exit 0 agree, 1 a wrong gradient, 2 bad input.
    Where autograd is wrong or not finite, the cause is named (leaked branch, overflow, 0·inf,
    inf - inf, cancellation, or a derivative truly undefined there) and each known rewrite is
    checked again on the same points; only one that passes is shown.

    Example:  gradcli check "log(1+exp(x))" --var "x=linspace(-1000,1000,100001)"   # exit 1
    """
    from ..errors import UsageError

    # EXPR (stdin, @FILE) is read and its size limits applied before torch loads.
    text = read_expression(expr) if expr is not None and not all_entries else None
    from ..verify.expression.check import check, check_all
    from ..verify.expression.result import LibraryCheck
    from .output import exit_status, show

    options = dict(points=points, order=order, atol=atol, rtol=rtol, dtype=dtype, device=device, seed=seed,
                   library_dirs=tuple(library or ()))
    if all_entries:
        if expr is not None or var:
            raise UsageError("--all checks the library entries: give no EXPR and no --var with it")
        if fix:
            raise UsageError("--fix prints the rewrite of one expression: give it the EXPR, not --all")
        result: Any = LibraryCheck(check_all(**options))
    elif expr is None:
        raise UsageError("give an expression to check (or --all)", hint='e.g. gradcli check "x*sigmoid(x)"')
    else:
        # JSON is for programs: the derivative as differentiated, without simplify's cost.
        result = check(text, var or (), simplify=not (json or fix), **options)
    if fix and not json:
        raise typer.Exit(_print_fix(result))
    show(result, "json" if json else "text")
    raise typer.Exit(exit_status(result.ok))


def _print_fix(result: Any) -> int:
    """`check --fix`: the expression to paste on stdout, or why there is none on stderr."""
    from ..words import problem_sentences
    from .output import exit_status, make_console, say

    if result.fix:
        say(result.fix)
        return exit_status(True)
    if result.ok:
        say(result.expression)
        return exit_status(True)
    say(f"no known rewrite fixes {result.expression}: " + "; ".join(problem_sentences(result.problems)), make_console(stderr=True))
    return exit_status(False)


@app.command("check-function")
@reports_errors
def check_function_command(
    target: Annotated[str, typer.Argument(metavar="PATH.py:NAME", help="Your file and the torch.autograd.Function class in it, or package.module:NAME; without :NAME a package, module, file or folder (every Function in it); or a model (every Function its forward applied).")],
    ref: Annotated[Optional[str], typer.Option("--ref", help="A reference expression (x*sigmoid(x)) the forward and backward must match.")] = None,
    var: VarOption = None,
    order: OrderOption = 1,
    seed: SeedOption = None,
    library: LibraryOption = None,
    json: JsonOption = False,
    output: Annotated[Optional[int], typer.Option("--output", metavar="N", help="Check only forward's output N (0 is the first); by default every differentiable floating output.")] = None,
    expect_grad: Annotated[Optional[list[str]], typer.Option("--expect-grad", metavar="[NAME=]EXPR", help="The gradient backward is meant to return for input NAME (a straight-through estimator, a gradient reversal), an expression of grad_output and the inputs, e.g. '-grad_output'; checked instead of finite differences (repeatable; NAME= may be left out for a single input).")] = None,
    init: InitOption = None,
    skip: Annotated[Optional[List[str]], typer.Option("--skip", metavar="PATTERN", help="A package or model: leave out the Functions whose name (mypkg.ops:Swish, or Swish) matches PATTERN (* and ? wildcards); listed as skipped. Repeatable.")] = None,
) -> None:
    """Check your own torch.autograd.Function: gradcheck (and gradgradcheck with --order 2)
    with any mismatch shown as input, element, expected vs got, and a likely cause.

    This imports PATH.py, so it runs the code in that file, as `python PATH.py` would; a file
    inside a package is imported as part of it (relative imports work). Inputs are named after
    forward's parameters (after ctx) and typed by their annotation or default: --var dim=1
    stays an int, [0, 2] for an integer parameter and randint(...) are long tensors,
    [True, False] a bool mask, none is None, and a tensor for a numeric parameter (alpha=[1.5])
    is differentiated; only floating tensors are. Without --var or a default, tensors are 14
    values in [-6, 4] (0, ±1, ±3 and beyond them), numbers their default. Outputs that are not
    floating tensors or are marked non-differentiable are listed and skipped. --ref compares
    the forward with the expression and the backward with sympy's derivative of it. Entries
    at a kink (hard-swish at ±3) are reported apart, not compared; second order
    differentiates sum(w*out) with seeded random weights w. The contract is audited
    (gradients returned per input, needs_input_grad, saved tensors, tensors on ctx); a jvp is
    checked against backward and finite differences, and torch.func (grad, jacrev, jacfwd,
    vmap) is tried when the Function defines jvp, vmap, setup_context or
    generate_vmap_rule. Exit 0 agree, 1 a wrong gradient, nothing tested (every first
    derivative compared is 0) or a backward torch refuses, 2 bad input (no file, no class, not
    a Function, wrong forward arity).

    Example:  gradcli check-function examples/swish.py:Swish --ref "x*sigmoid(x)" --order 2

    Many at once: without :NAME (a package, module, file or folder) every Function defined
    there is checked at inferred inputs; on a model (PATH.py:Net, fed with --var and --init as
    trace feeds it) every custom Function its forward applied, at the arguments it received.
    One line each; exit 1 if any is wrong or could not run (--skip leaves one out), 2 if none
    was found.

    Example:  gradcli check-function examples/custom_ops   # exit 1
    """
    from ..verify.function.check import check_function
    from .output import exit_status, show, user_prints_aside

    # A package, module, file or folder (no :NAME), or a model: every Function in it, one line each.
    from ..verify.discovery.check import check_discovered

    with user_prints_aside(json):
        many = check_discovered(target, var or (), order=order, seed=seed, ref=ref, init=init or (), skip=skip or (),
                                output=output, expect_grad=expect_grad or ())
    if many is not None:
        show(many, "json" if json else "text")
        raise typer.Exit(exit_status(many.ok))
    with user_prints_aside(json):
        result = check_function(
            target, var or (), ref=read_expression(ref) if ref is not None else None, order=order, seed=seed,
            library_dirs=tuple(library or ()), output=output, expect_grad=tuple(expect_grad or ()),
        )
    show(result, "json" if json else "text")
    raise typer.Exit(exit_status(result.ok))
