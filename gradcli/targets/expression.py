"""An expression of gradcli's language as a Target: parse, make the --var leaves, build."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..interpret.to_torch import SPAN_KEY
from ..errors import Span
from .base import BuildSettings, Computation, LeafSource, Origin

#: What an expression is computed in unless --dtype says otherwise.
DEFAULT_DTYPE = "float64"


@dataclass(frozen=True)
class ExpressionTarget:
    """`text` with `variables` (--var texts) and the library `library_dirs` adds."""

    text: str
    variables: Sequence[str] = ()
    library_dirs: Sequence[str | Path] = ()
    default: Callable[[str, int], str] | None = None

    def build(self, settings: BuildSettings) -> Computation:
        from ..pipeline import build_prepared, prepare

        prepared = prepare(
            self.text, self.variables, dtype=settings.dtype or DEFAULT_DTYPE, device=settings.device,
            seed=settings.seed, library_dirs=self.library_dirs, default=self.default,
        )
        details: dict[str, Any] = {}
        if settings.record:  # --symbolic: each applied operation, matched to its node later
            from ..interpret.applications import build_recorded

            built, applications = build_recorded(prepared)
            details = {"prepared": prepared, "applications": applications}
        else:
            built = build_prepared(prepared)
        leaves = prepared.leaves
        return Computation(
            kind="expression",
            description=self.text,
            leaves=leaves.tensors,
            sources={name: LeafSource(leaves.specs[name].text, name in leaves.defaulted) for name in leaves.tensors},
            output=built.output,
            bindings=built.bindings,
            seed=leaves.seed,
            drew_random=any(spec.random for spec in leaves.specs.values()),
            origin_of=expression_origin,
            details=details,
        )


def expression_origin(grad_fn: Any) -> Origin | None:
    """The span the torch builder wrote on the node."""
    span = grad_fn.metadata.get(SPAN_KEY)
    return Origin(span=span) if isinstance(span, Span) else None
