"""Which comparisons of check-function tested nothing, and what that does to the verdict.

A Jacobian block whose compared entries are all zero on both sides (sparsemax on an input
that makes its output one-hot; the second derivatives of a piecewise-linear function) agrees
with any backward that returns zeros: its "ok" shows nothing. Such blocks are listed, and:

- when every first-order block tested nothing, nothing about backward was checked at all:
  the result is not ok (exit 1), its verdict NOT TESTED, because a CI run must not pass on a
  check that compared only zeros (give inputs where the output moves);
- when only some blocks tested nothing (one input's, or the second order of a function whose
  second derivative is 0 wherever it exists), the rest was checked: the verdict stays OK,
  exit 0, but says which tested nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

#: What a block was compared against.
Against = Literal["finite differences", "reference"]


@dataclass(frozen=True)
class Untested:
    """One Jacobian block whose compared entries were all zero."""

    input: str
    order: int
    against: Against

    def as_dict(self) -> dict[str, Any]:
        return {"input": self.input, "order": self.order, "against": self.against}

    def __str__(self) -> str:
        return f"{self.input} at order {self.order}"


def untested(result: Any) -> list[Untested]:
    """The blocks that tested nothing, in the order of the result's sections."""
    found = []
    for order, against, checks in ((1, "finite differences", result.first), (2, "finite differences", result.second),
                                   (1, "reference", result.ref_first), (2, "reference", result.ref_second)):
        found += [Untested(c.name, order, against) for c in checks if c.ok and c.tested_nothing]
    return found


def nothing_tested(result: Any) -> bool:
    """Every first-order block compared only zeros: backward was not tested at all."""
    return bool(result.first) and all(c.ok and c.tested_nothing for c in result.first)


def untested_phrase(result: Any) -> str:
    """'x at order 2, y at order 1': each (input, order) once."""
    seen: list[str] = []
    for item in untested(result):
        if str(item) not in seen:
            seen.append(str(item))
    return ", ".join(seen)


def not_tested_verdict(result: Any) -> str:
    entries = sum(c.got.numel() - c.kinks for c in result.first)
    return (f"NOT TESTED: every first derivative compared is 0 at these inputs ({entries:,} entries), so a "
            "backward returning zeros would pass too: give --var inputs where the output moves")


def weights_note(constant_sum: bool, seed: int) -> str:
    """What the second order differentiated, and whether sum(out) would have tested nothing."""
    why = ("sum(out) is constant at these inputs (its gradient is 0, as for a normalising output), so "
           if constant_sum else "")
    return f"{why}second derivatives are those of sum(w * out), w drawn from [0.5, 1.5) with seed {seed}"
