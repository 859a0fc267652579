"""One comparison: a computed derivative (autograd, or a published formula) against the exact one.

The exact derivative is known three ways, from cheap to dear: its float64 value on every
point (vectorised), and, where that disagrees with the candidate or either is not finite,
its 50-digit value (`arbitrate`). Points outside the domain and kinks are set aside and
counted; so are points whose exact derivative is beyond the candidate dtype's range (no
float can hold it). What is left is compared with |got - exact| <= atol + rtol*|exact|.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .arbitrate import ARBITRATE_LIMIT, UNDEFINED, sample
from .maxima import chunk_errors, errors
from .symbolic import CHUNK

#: Kink points listed by name in a report.
KINK_EXAMPLES = 3
#: Ranges of wrong values listed in a report.
RANGES_SHOWN = 5
#: Agreeing points looked up at 50 digits all the same: a share of them, at least SAMPLE_MIN
#: and at most SAMPLE_MAX, plus (at most FORCED_MAX) every point where the formula cancels
#: or an input or the derivative is extreme (|v| >= EXTREME_* or 0 < |v| <= 1/EXTREME_*).
SAMPLE_SHARE, SAMPLE_MIN, SAMPLE_MAX, FORCED_MAX = 0.01, 8, 200, 500
#: In the exact mode (one symbol per element) each element's formula is compiled for its
#: 50-digit value (~40 ms), so a quantity there samples this many agreeing elements.
EXACT_SAMPLE = 2
EXTREME_INPUT, EXTREME_VALUE = 1e6, 1e100


@dataclass
class Target:
    """The exact derivative of one quantity at P points, and how to describe a point."""

    name: str
    reference: torch.Tensor  # float64 value of the exact formula (P,)
    undefined: torch.Tensor  # bool (P,): outside the domain
    kink: torch.Tensor  # bool (P,): exactly at a branch change
    exact: Callable[[list[int]], list[float | None]]  # 50-digit values at some indices
    point: Callable[[int], dict[str, Any]]  # {"x": 0.5} or {"element": "x[1]"}
    coords: dict[str, torch.Tensor] = field(default_factory=dict)  # per variable (P,), if elementwise
    near: torch.Tensor | None = None  # bool (P,): too close to a kink for finite differences
    suspect: torch.Tensor | None = None  # bool (P,): the formula cancels there (regions.py)
    # (index, the dtype's largest value) -> undefined.py's Verdict: sympy's and mpmath's say
    witnesses: Callable[[int, float], Any] | None = None
    # Branch boundaries where the derivative exists after all (smooth_boundaries.py): compared
    smooth: list[Any] = field(default_factory=list)


@dataclass
class Comparison:
    """The outcome for one quantity (a table row). Numbers stay floats, nan and inf included:
    only the JSON edge (render/trace_json.py's finite_safe) writes those as strings."""

    name: str
    candidate: str  # "autograd" | "published"
    points: int = 0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    worst_at: dict[str, Any] | None = None
    skipped_outside_domain: int = 0
    kinks: int = 0
    kink_examples: list[dict[str, Any]] = field(default_factory=list)
    beyond_range: int = 0
    disagreeing: int = 0
    arbitrated: int = 0
    float64_formula_wrong: int = 0
    not_arbitrated: int = 0
    sampled_exact: int = 0  # agreeing points checked at 50 digits all the same (`_sampled`)
    wrong: int = 0
    wrong_ranges: list[dict[str, Any]] = field(default_factory=list)
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.wrong == 0

    def as_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items()}
        data["ok"] = self.ok
        return data


def compare(
    candidate: torch.Tensor, target: Target, *, candidate_name: str, atol: float, rtol: float, largest: float,
    seed: int = 0,
) -> Comparison:
    """Compare `candidate` (any float dtype, P values) with `target`; `largest` is the
    candidate dtype's largest finite value (exact values beyond it are set aside)."""
    got = candidate.detach().to(torch.float64).reshape(-1)
    ref = target.reference
    result = Comparison(target.name, candidate_name)
    valid = ~target.undefined & ~target.kink
    result.skipped_outside_domain = int(target.undefined.count_nonzero())
    kinks = (target.kink & ~target.undefined).nonzero().flatten().tolist()
    result.kinks = len(kinks)
    result.kink_examples = [
        {**target.point(i), candidate_name: got[i].item()} for i in kinks[:KINK_EXAMPLES]
    ]

    # float64 symbolic values that are finite and within the candidate's range are trusted
    # where the candidate agrees with them; everything else goes to arbitration.
    # A finite float64 value beyond the dtype's range, or an infinity both sides agree on, is
    # an overflow no float can avoid: set aside without arbitration.
    # The passes over all P points run CHUNK points at a time (same values): on 10^7 points
    # each whole-size temporary is 80 MB, which malloc maps fresh and the kernel faults in
    # page by page every time; chunk-sized ones are reused from the heap.
    # The same pass gathers each chunk's errors (`maxima.chunk_errors`) from the differences
    # it computed anyway; `maxima.errors` updates them where a 50-digit value replaces one.
    close = torch.empty(got.numel(), dtype=torch.bool)
    disputed_parts = []
    measured = {}
    for start in range(0, got.numel(), CHUNK):
        part = slice(start, start + CHUNK)
        g, r, v = got[part], ref[part], valid[part]
        finite = torch.isfinite(r)
        size = r.abs()
        big = size > largest  # finite beyond the dtype's range, or infinite
        if big.any():  # rare: the overflow masks only where some value is that large
            overflow = v & big & (finite | (g == r))
            result.beyond_range += int(overflow.count_nonzero())
            v = v & ~overflow
        gap, tol = (g - r).abs(), atol + rtol * size
        c = close[part] = v & finite & torch.isfinite(g) & (gap <= tol)
        disputed_parts.append((v & ~c).nonzero().flatten() + start)
        measured[start] = chunk_errors(c, gap, tol, size, atol)
    disputed = torch.cat(disputed_parts).tolist() if disputed_parts else []
    result.disagreeing = len(disputed)
    chosen = sample(disputed, ARBITRATE_LIMIT)
    result.arbitrated = len(chosen)
    result.not_arbitrated = len(disputed) - len(chosen)
    exact = target.exact(chosen) if chosen else []
    # Two float64 computations that agree may share an error (both cancel the same way):
    # some agreeing points are looked up at 50 digits too. Where the formula cannot be
    # compiled for mpmath (lambdify refuses some Piecewise conditions), none are.
    extra = _sampled(close, got, target, seed)
    try:
        extra_exact = target.exact(extra) if extra else []
    except Exception:  # noqa: BLE001 - sympy's printers raise many kinds; sampling is extra
        extra, extra_exact = [], []
    result.sampled_exact = len(extra)
    arbitrated = set(chosen)
    found = dict(zip(extra, extra_exact))
    found.update(zip(chosen, exact))
    disputed = sorted(set(disputed) | set(extra))

    decided_idx, decided_exact, verdicts = [], [], []
    for index in sorted(found):
        value = found[index]
        if index not in arbitrated and (value is UNDEFINED or abs(value) > largest):
            continue  # a sampled point the float64 values settled: nothing to add
        if value is UNDEFINED:
            result.skipped_outside_domain += 1
        elif abs(value) > largest:
            result.beyond_range += 1
        else:
            good = math.isfinite(got[index].item()) and abs(got[index].item() - value) <= atol + rtol * abs(value)
            decided_idx.append(index)
            decided_exact.append(value)
            verdicts.append(good)
            if good and index in arbitrated:
                result.float64_formula_wrong += 1
    result.wrong = verdicts.count(False)

    # Errors over every decided point: agreeing ones against the float64 value, arbitrated
    # ones against the 50-digit value.
    counted = close  # built above for this comparison alone
    overrides = dict(zip(decided_idx, decided_exact))
    recounted: set[int] = set()  # decided points counted in the first pass (the sampled ones)
    if decided_idx:
        at = torch.tensor(decided_idx)
        recounted = {i for i, was in zip(decided_idx, counted[at].tolist()) if was}
        counted[at] = True
    result.points = int(counted.count_nonzero())  # a bool sum() makes an int64 copy (80 MB, 0.15 s on 10^7)
    if result.points:
        max_abs, max_rel, worst = errors(got, ref, counted, overrides, atol, rtol, measured, recounted)
        result.max_abs_err = max_abs
        result.max_rel_err = max_rel
        truth = overrides.get(worst, ref[worst].item())
        result.worst_at = {**target.point(worst), candidate_name: got[worst].item(), "exact": truth}
    result.wrong_ranges = _ranges(decided_idx, decided_exact, verdicts, got, target, disputed)
    return result


def _sampled(close: torch.Tensor, got: torch.Tensor, target: Target, seed: int) -> list[int]:
    """Agreeing points to look up at 50 digits anyway: every point (at most FORCED_MAX,
    evenly spaced) where the formula cancels or a value is extreme, and a share of the rest
    (SAMPLE_SHARE, between SAMPLE_MIN and SAMPLE_MAX points) drawn with `seed`."""
    forced = torch.zeros_like(close)
    for start in range(0, close.numel(), CHUNK):  # chunk by chunk: no whole-size |values| (80 MB each)
        part = slice(start, start + CHUNK)
        chunk = forced[part]
        if target.suspect is not None:
            chunk |= target.suspect[part]
        for values in target.coords.values():
            size = values[part].abs()
            chunk |= (size >= EXTREME_INPUT) | ((size > 0) & (size <= 1 / EXTREME_INPUT))
        size = got[part].abs()
        chunk |= (size >= EXTREME_VALUE) | ((size > 0) & (size <= 1 / EXTREME_VALUE))
        chunk &= close[part]
    picked = set(_spaced(forced.nonzero().flatten(), FORCED_MAX if target.coords else EXACT_SAMPLE))
    share = min(SAMPLE_MAX, max(SAMPLE_MIN, math.ceil(SAMPLE_SHARE * close.numel())))
    if not target.coords:  # the exact mode
        share = EXACT_SAMPLE
    if share and close.numel():
        # Random positions among the agreeing, not forced points, without listing them
        # all (10^7 points): draw positions, keep the eligible ones, draw again if short.
        generator = torch.Generator().manual_seed(seed)
        eligible = close & ~forced
        found: list[int] = []
        for _ in range(4):
            drawn = torch.randint(0, close.numel(), (8 * share,), generator=generator)
            found = list(dict.fromkeys([*found, *drawn[eligible[drawn]].tolist()]))[:share]
            if len(found) == share:
                break
        picked |= set(found)
    return sorted(picked)


def _spaced(indices: torch.Tensor, limit: int) -> list[int]:
    """At most `limit` of `indices`, evenly spaced, first and last included."""
    if indices.numel() <= limit:
        return indices.tolist()
    return indices[torch.linspace(0, indices.numel() - 1, limit).round().long()].tolist()


def _ranges(
    indices: list[int], exact: list[float], verdicts: list[bool], got: torch.Tensor, target: Target,
    disputed: list[int],
) -> list[dict[str, Any]]:
    """Runs of consecutive arbitrated points where the candidate is wrong."""
    runs: list[list[int]] = []
    for k, good in enumerate(verdicts):
        if good:
            continue
        if runs and runs[-1][-1] == k - 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    position = {index: p for p, index in enumerate(disputed)}
    described = []
    for run in runs[:RANGES_SHOWN]:
        first, last = indices[run[0]], indices[run[-1]]
        where = {}
        for name, values in target.coords.items():
            picked = values[torch.tensor([indices[k] for k in run])]
            where[name] = [float(picked.min()), float(picked.max())]
        if not where:
            where = {"at": [target.point(first), target.point(last)]}
        described.append({
            "where": where,
            "points": position[last] - position[first] + 1,
            "got": _summary([got[indices[k]].item() for k in run]),
            "exact": _summary([exact[k] for k in run]),
        })
    return described


def _summary(values: list[float]) -> str:
    """'nan', '1', or 'from -3.2 to 0.5': what a run of values looks like."""
    if all(math.isnan(v) for v in values):
        return "nan"
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < len(values):
        kinds = sorted({_fmt(v) for v in values if not math.isfinite(v)})
        return "/".join(kinds) + (f" or finite values {_span(finite)}" if finite else "")
    return _span(finite)


def _span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return _fmt(low) if _fmt(low) == _fmt(high) else f"from {_fmt(low)} to {_fmt(high)}"


def _fmt(value: float) -> str:
    return f"{value:.6g}"
