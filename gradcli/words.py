"""The words results are described with, chosen once.

`str(result)`, the JSON `problems`, the console tables and the plot report all describe
the same checks; when each wrote its own sentence they drifted apart. They all take their
labels and phrases from here. Plain Python on plain values: no torch, no rich.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from .outcome import say


def derivative_label(names: str | Sequence[str], *, superscript: bool = False) -> str:
    """d/dx for "x"; d2/dx dy for "x,y" or ("x", "y"); d²/dx² with `superscript` (pictures)."""
    parts = names.split(",") if isinstance(names, str) else list(names)
    if len(parts) == 1:
        return f"d/d{parts[0]}"
    if superscript and len(set(parts)) == 1:
        return f"d²/d{parts[0]}²"
    return "d2/" + " ".join(f"d{p}" for p in parts)


def plural(count: int, noun: str) -> str:
    """'1 point', '2 points', '1,011 points'."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def describe_where(where: dict[str, Any]) -> str:
    """Where a wrong range lies: 'x from 709.8 to 1000', or the first and last element."""
    if "at" in where:
        first, last = where["at"]
        a, b = first.get("element", first), last.get("element", last)
        return str(a) if a == b else f"{a} to {b}"
    parts = []
    for name, (low, high) in where.items():
        parts.append(f"{name} = {low:.6g}" if low == high else f"{name} from {low:.6g} to {high:.6g}")
    return ", ".join(parts)


def candidate_name(candidate: str) -> str:
    """Who gave a compared value, as a sentence's subject."""
    return "autograd" if candidate == "autograd" else "the library's published derivative"


def comparison_skipped(c: Any) -> list[str]:
    """The console table's 'skipped' column: points set aside, not compared."""
    return [p for p in (
        f"{c.skipped_outside_domain:,} outside domain" if c.skipped_outside_domain else "",
        f"{c.kinks:,} kink{'s' if c.kinks != 1 else ''}" if c.kinks else "",
    ) if p]


def comparison_findings(c: Any) -> list[str]:
    """What a comparison found beyond its agreeing points, one phrase each."""
    return [p for p in (
        f"{c.beyond_range:,} beyond the dtype's range" if c.beyond_range else "",
        f"{c.float64_formula_wrong:,} where only the float64 formula was off" if c.float64_formula_wrong else "",
        f"{c.wrong:,} WRONG" if c.wrong else "",
    ) if p]


def comparison_notes(c: Any) -> list[str]:
    """The console table's 'notes' column: the findings, and how many points went unarbitrated."""
    return comparison_findings(c) + ([f"{c.not_arbitrated:,} not arbitrated"] if c.not_arbitrated else [])


def wrong_range_problem(c: Any, r: dict[str, Any]) -> str:
    """A wrong range as the sentence of a problem."""
    return (f"{candidate_name(c.candidate)} gives {r['got']} for {describe_where(r['where'])} where the true "
            f"{derivative_label(c.name)} is {r['exact']} ({plural(r['points'], 'point')})")


def wrong_range_line(c: Any, r: dict[str, Any]) -> str:
    """A wrong range under the console table (the table row names the derivative)."""
    return (f"{c.name}: {c.candidate} gives {r['got']} for {describe_where(r['where'])}, exact {r['exact']} "
            f"({plural(r['points'], 'point')})")


def sampled_problem(c: Any) -> str:
    return (f"{c.arbitrated:,} of the {c.disagreeing:,} disagreeing points of {derivative_label(c.name)} were "
            "arbitrated at 50 digits (evenly spaced); the ranges are from those")


def gradcheck_state(verdict: Any) -> str:
    """passed | FAILED | not run."""
    return "passed" if verdict.ok else "not run" if verdict.ok is None else "FAILED"


def gradcheck_mode(verdict: Any) -> str:
    return "fast mode" if verdict.fast_mode else "slow mode"


def describe_gradcheck(verdict: Any) -> str:
    """How gradcheck went: 'passed (fast mode, 1,010 input elements)', 'FAILED (slow mode): ...'."""
    if verdict.ok is None:
        return f"not run ({verdict.message})"
    if verdict.ok:
        return f"passed ({gradcheck_mode(verdict)}, {verdict.points:,} input elements)"
    return f"FAILED ({gradcheck_mode(verdict)}): {verdict.message}"


def gradcheck_problem(label: str, verdict: Any) -> str:
    return f"{label} failed: {verdict.message}"


def input_check_line(title: str, c: Any) -> str:
    """One input's Jacobian block of check-function: ok, or how many entries are wrong; the
    entries at a kink apart; a block whose compared entries are all 0 tested nothing."""
    apart = f"; {kinks_apart(c.kinks)}" if c.kinks else ""
    if c.ok and c.tested_nothing:
        return f"{title} [{c.name}]: tested nothing: every compared entry is 0{apart}"
    if c.ok:
        return f"{title} [{c.name}]: ok (max abs err {c.max_abs_err:.3g}){apart}"
    return f"{title} [{c.name}]: {c.count} of {c.got.numel()} entries wrong{apart}"


def kinks_apart(count: int) -> str:
    return f"at a kink: {count:,} entr{'ies' if count != 1 else 'y'}, not compared"


def outside_kink(k: Any) -> str:
    """A first derivative at a kink that is neither one-sided derivative nor between them."""
    return (f"{k.element} (= {k.at:.6g}) -> {k.output} is at a kink, with one-sided derivatives {k.left:.6g} "
            f"(left) and {k.right:.6g} (right): backward gives {k.got:.6g}, outside both")


def kink_entry(m: Any) -> str:
    """An entry at a kink: where, and both values, neither judged."""
    return f"at a kink: {m.element} (= {m.at:.6g}) -> {m.output}: got {m.got:.6g}, not compared with {m.expected:.6g}"


#: Tensor inputs with more elements are shown by their first few values and their shape.
INPUT_SHOWN = 64


def input_value(value: Any) -> Any:
    """An input as shown: a tensor's values rounded to 6 digits, nested as the tensor is, with
    its shape when it has two dimensions or more (or is long) and its dtype unless floating; a
    number or None as it is."""
    if not hasattr(value, "detach"):
        return value
    dtype = "" if value.is_floating_point() else str(value.dtype).removeprefix("torch.")
    shape = "x".join(map(str, value.shape))
    flat = value.detach().reshape(-1)[:INPUT_SHOWN + 1].tolist()
    if value.dim() == 0:
        return f"{_rounded(flat[0])} ({dtype or 'scalar'} tensor)"
    if value.numel() > INPUT_SHOWN:
        head = ", ".join(str(_rounded(v)) for v in flat[:6])
        return f"[{head}, …] (shape {shape}{', ' + dtype if dtype else ''})"
    text = str(_rounded(value.detach().tolist()))
    about = ", ".join(part for part in (f"shape {shape}" if value.dim() >= 2 else "", dtype) if part)
    return f"{text} ({about})" if about else text


def input_lines(name: str, value: Any, origin: str = "") -> list[str]:
    """An input as text lines: `name = value`, or for a small matrix its shape on the first
    line and one row per line after it, so that a 2-D input reads as one."""
    if hasattr(value, "detach") and value.dim() == 2 and 0 < value.numel() <= INPUT_SHOWN:
        dtype = "" if value.is_floating_point() else f", {str(value.dtype).removeprefix('torch.')}"
        rows = [f"  {_rounded(row)}" for row in value.detach().tolist()]
        return [f"{name} = (shape {'x'.join(map(str, value.shape))}{dtype}){origin}", *rows]
    return [f"{name} = {input_value(value)}{origin}"]


def _rounded(value: Any) -> Any:
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return round(value, 6) if isinstance(value, float) else value


def input_json(value: Any) -> Any:
    """An input in a JSON document: a tensor's values nested as the tensor is; a number, a
    bool or None as it is; anything else (an ndarray, a tuple) as its repr."""
    if hasattr(value, "detach"):
        return value.detach().tolist()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def pass_error_problem(index: int, error_type: str, message: str) -> str:
    """A trace pass that raised: its number, torch's error type and first sentence."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    return f"pass {index + 1}: {error_type}: {first.split('. ')[0].rstrip('.')}"


def nonfinite_problem(index: int, name: str) -> str:
    return f"pass {index + 1}: the gradient of {name} is not finite"


def nonfinite_origin_problem(node: str) -> str:
    return f"the first non-finite gradient comes out of {node}"


def forward_nonfinite_problem(found: dict) -> str:
    """Code targets: where forward first produced a nan or inf (a NaN loss usually starts there)."""
    nan = found.get("first_nan")
    if nan is not None:  # an inf first (written or made), the nan later: the nan's line is the one to fix
        rows = " (a softmax row -inf throughout: 0/0)" if nan.get("masked_rows") else ""
        inf = "your own -inf constant" if found.get("written") else "an inf"
        return (f"forward first produced a nan in {nan['call']}() at {nan['file']}:{nan['line']}{rows}, from "
                f"{inf} in {found['call']}() at {found['file']}:{found['line']}")
    kind = found.get("kind") or "nan or inf"
    kind = "an inf" if kind == "inf" else "a nan" if kind == "nan" else "a nan or inf"
    return f"forward first produced {kind} in {found['call']}() at {found['file']}:{found['line']}"


def overall(ok: bool, problems: Sequence[str], agreed: Iterable[str]) -> str:
    """The one-line verdict: OK: what agreed; or PROBLEM: the first problem (and how many more)."""
    if not ok:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return "PROBLEM: " + problems[0] + more
    parts = list(agreed)
    return "OK: " + ("; ".join(parts) if parts else "nothing disagreed")


def number(value: Any, digits: int = 3) -> str:
    """A float to `digits` significant digits; anything else as it is."""
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def chain_mismatch(node: str, name: str) -> str:
    """trace --symbolic: a node whose formula's value differs from what torch passed on."""
    return f"{node} {name}: the chain-rule formula's value differs from the gradient torch passed through it"


def chain_leaf_mismatch(variable: str) -> str:
    return f"{variable}: the composed chain-rule gradient differs from the gradient torch accumulated"


def chain_proof_failed(variable: str) -> str:
    return f"{variable}: the composed chain-rule gradient differs from sympy's derivative of the expression"


def chain_second_failed(of: str, variable: str) -> str:
    return (f"d/d{variable} sum(gradient of {of}): the second derivative composed along the gradient's graph "
            "differs from sympy's or from torch's")


def proof_words(kind: str, *, points: int = 0, why: str = "") -> str:
    """How a leaf's composed gradient was shown equal to sympy's derivative."""
    if kind == "simplify":
        return "proved: simplify(composed − sympy's derivative) = 0"
    if kind == "numeric":
        return f"equal numerically at the traced values and {plural(points, 'random point')} ({why})"
    if kind == "differs":
        return f"DIFFERS from sympy's derivative ({why})"
    return f"not compared: {why}"


#: How each cause of a wrong or non-finite gradient is named (verify/causes/at_points.py).
CAUSE_TITLES = {
    "leaked_branch": "leaked branch",
    "masked_row": "softmax of a fully masked row",
    "overflow": "overflow",
    "inf_minus_inf": "inf - inf",
    "zero_times_inf": "0·inf",
    "cancellation": "cancellation",
    "undefined": "truly undefined (not a bug)",
    "unexplained": "cause not found",
}


def cause_lines(cause: Any, *, rewrites: bool = True) -> list[str]:
    """A cause in words: what, where, why; then (`rewrites`: when rewrites were tried) its
    proven rewrite or that none is known."""
    if cause.where:
        head = (f"cause of {derivative_label(cause.derivative)} at {plural(cause.points, 'point')} "
                f"({describe_where(cause.where)}): ")
    else:  # a whole computation (trace --flow, a model): the gradients of these inputs
        if cause.kind == "cancellation":  # its elements are those of the node where parts meet
            head = f"cause of the inaccurate gradient of {cause.derivative}: "
        else:
            head = f"cause of the non-finite gradient of {cause.derivative} ({plural(cause.points, 'element')}): "
    lines = [head + f"{CAUSE_TITLES[cause.kind]}: {cause.summary}"]
    for factor in cause.factors:
        source = f" ({factor['source']})" if factor.get("source") else ""
        lines.append(f"  {factor.get('role', 'gradient')}: {factor['value']} at {factor['node']}{source}")
    rewrite = cause.rewrite
    if not rewrites:
        return lines
    if rewrite is not None:
        tradeoff = f" (trade-off: {rewrite['tradeoff']})" if rewrite.get("tradeoff") else ""
        lines.append(f"  rewrite: {rewrite['expression']}: {_rewrite_outcome(rewrite)}{tradeoff}")
    elif cause.is_bug:
        lines.append("  rewrite: no known rewrite fixes it")
    return lines


def _rewrite_outcome(r: dict[str, Any]) -> str:
    if r["wrong_before"]:
        return f"wrong at {plural(r['wrong_before'], 'point')} -> exact at all {r['points']:,} compared"
    return (f"autograd not finite at {plural(r['nonfinite_before'], 'point')} -> {r['nonfinite_after']:,}, "
            "right at every compared point")


def cancellation_problem(cause: Any) -> str:
    """trace --flow on code: a finite gradient that lost its digits (verify/causes/cancellation.py)."""
    where = f" at {cause.source}" if cause.source else ""
    return (f"the gradient of {cause.derivative} is finite but inaccurate: cancellation{where} "
            f"({plural(cause.points, 'element')} of the gradient where the parts meet off their exact "
            "50-digit value by more than the dtype's tolerance)")


def unseen_cause_problem(cause: Any) -> str:
    """A non-finite gradient the float64 formula called undefined, the 50-digit value not."""
    return (f"autograd's {derivative_label(cause.derivative)} is not finite at {plural(cause.points, 'point')} "
            f"({describe_where(cause.where)}) where the exact derivative (50 digits) is finite: "
            f"{CAUSE_TITLES[cause.kind]}")


# -- problems: a result's `problems` are records (outcome.Problem); each kind's sentence is
# declared beside the result that makes it (outcome.sentence), from the phrases above.
def problem_sentence(problem: Any) -> str:
    """The sentence of one `Problem` record, as the text report and the JSON `problems` show it."""
    return say(problem)


def problem_sentences(problems: Iterable[Any]) -> list[str]:
    return [problem_sentence(p) for p in problems]


def short_number(x: Any) -> str:
    """A number with 2 significant digits, or a string ("nan", "inf") as it is."""
    return x if isinstance(x, str) else f"{x:.2g}"


class Fields:
    """A record's fields as attributes, for the sentence helpers above that read `c.name`."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


def byte_size(nbytes: int | None) -> str:
    """Bytes in binary units, 3 significant digits: 512 B, 1.5 KiB, 12.0 MiB."""
    if nbytes is None:
        return "-"
    value, unit = float(nbytes), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            break
        value /= 1024
    if unit == "B":
        return f"{int(value)} B"
    return f"{value:.3g} {unit}"
