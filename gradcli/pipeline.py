"""Text to program: the first steps every command shares.

`load` reads the expression library (built-in, $GRADCLI_LIBRARY, `--library` folders) and
parses the text against it; `prepare` also makes the leaf tensors from `--var` options.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from . import limits
from .interpret.variables import Leaves, make_leaves
from .language import parser
from .language.library import Library, default_library, library_folders, load_library
from .language.expansion import check_expansion
from .language.nodes import Program
from .language.signatures import Signature


def load(expression: str, library_dirs: Sequence[str | Path] = ()) -> tuple[Program, Library]:
    """Parse `expression` with the library its folders define."""
    program, library, _ = _load_sized(expression, library_dirs)
    return program, library


def _load_sized(expression: str, library_dirs: Sequence[str | Path]) -> tuple[Program, Library, int]:
    """`load`, and the program's size with its library calls inlined (measured once)."""
    library = load_library(library_folders(library_dirs))
    program = parser.parse(expression, library.functions)
    return program, library, check_expansion(program, library.functions)


def parse(source: str, functions: Mapping[str, Signature] | None = None, **options: Any) -> Program:
    """`language.parser.parse` with the expression library's functions unless `functions`
    are given: the public `gradcli.parse` (`gradcli.parse("swish(x)")` knows swish)."""
    if functions is None:
        functions = default_library().functions
    return parser.parse(source, functions, **options)


@dataclass
class Prepared:
    """A parsed program, its library and its leaf tensors: ready to build."""

    program: Program
    library: Library
    leaves: Leaves


def prepare(
    expression: str,
    var_options: Sequence[str] = (),
    *,
    dtype: str = "float64",
    device: str = "cpu",
    seed: int | None = None,
    library_dirs: Sequence[str | Path] = (),
    default: Callable[[str, int], str] | None = None,
) -> Prepared:
    """Parse `expression` and make its leaves; nothing is built yet."""
    program, library, size = _load_sized(expression, library_dirs)
    leaves = make_leaves(
        program.variables, var_options, dtype=dtype, device=device, seed=seed, default=default
    )
    # The leaves are bounded by MAX_TOTAL_ELEMENTS; the graph built from them, by this.
    elements = sum(t.numel() for t in leaves.tensors.values())
    limits.check_work(elements, size)
    return Prepared(program, library, leaves)


def build_prepared(prepared: Prepared) -> Any:
    """Build the torch graph of a prepared program (see `build.to_torch.build`)."""
    from .interpret.to_torch import build

    return build(prepared.program, prepared.leaves.tensors, library=prepared.library)
