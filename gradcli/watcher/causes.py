"""Watch's catalogue of causes: the recorder's first non-finite forward call, or the node
reasoning `check` and `trace --flow` use (verify/causes/), named in one list of kinds
(result.py `CauseKind`, docs/causes.md "watch") with one sentence each."""

from __future__ import annotations

from typing import Any

from .result import WatchCause, WatchOrigin

#: Divisions: a nan out of finite inputs is 0/0, an inf is x/0.
_DIVISIONS = {"div", "true_divide", "truediv", "divide", "floor_divide", "reciprocal", "rsqrt"}
#: Forward calls whose inf output from finite inputs is a logarithm of zero.
_LOGS = {"log", "log2", "log10", "log_", "xlogy", "log_softmax", "nll_loss", "binary_cross_entropy"}
_HALF = {"float16", "bfloat16"}
#: verify/causes' kinds, as watch names them.
_NODE_KINDS = {"undefined": "infinite_derivative", "overflow": "overflow", "leaked_branch": "leaked_branch",
               "zero_times_inf": "zero_times_inf", "inf_minus_inf": "inf_minus_inf", "masked_row": "masked_row"}


def origin_from(phase: str, node: str | None, where: Any) -> WatchOrigin:
    """A WatchOrigin from the recorder's tag (targets/base.py Origin) on the node or call."""
    if where is None:
        return WatchOrigin(phase, node)  # type: ignore[arg-type]
    return WatchOrigin(phase, node, where.module, where.module_class, where.file, where.line,  # type: ignore[arg-type]
                       where.code)


def function_origin(node: Any) -> WatchOrigin | None:
    """For a user's autograd.Function's node: its backward method, file and line (the
    recorder tags such a node with the module that consumed its output, not the Function)."""
    import inspect

    forward_cls = getattr(type(node), "_forward_cls", None)
    if forward_cls is None:
        return None
    backward = getattr(forward_cls, "backward", None)
    try:
        file = inspect.getsourcefile(backward)  # type: ignore[arg-type]
        lines, first = inspect.getsourcelines(backward)  # type: ignore[arg-type]
        # the def line, not the first line of the source (`@staticmethod` above it)
        at = next((i for i, text in enumerate(lines) if text.strip().startswith("def ")), 0)
        line, code = first + at, lines[at].strip()
    except (TypeError, OSError):
        file, line, code = None, None, None
    return WatchOrigin("backward", node.name(), None, forward_cls.__name__, file, line, code)


def forward_cause(event: Any, origin: WatchOrigin) -> WatchCause:
    """Why the first non-finite forward output (the recorder's Event) is what it is."""
    detail = event.detail
    kind, dtype, op = detail.get("kind"), detail.get("dtype", ""), event.call
    where = f"{op}()" + (f" in {origin.module_class} ({origin.module})" if origin.module else
                         (" in the loss" if origin.module is None else f" in {origin.module_class}"))
    if detail.get("masked_rows"):
        return WatchCause("masked_row", f"{where} gives nan on {detail['masked_rows']} row(s) that are -inf "
                                        "throughout (a fully masked row of a softmax)")
    if op in _DIVISIONS and not detail.get("written"):
        what = "0 by 0 (nan)" if kind == "nan" else "by 0 (inf)"
        return WatchCause("division_by_zero", f"{where} divides {what}: a mean over an empty mask, a norm of a "
                                              "zero vector? (clamp the divisor, or skip the empty batch)")
    fresh = kind == "inf" and not detail.get("written")
    if fresh and op in _LOGS:
        return WatchCause("log_of_zero", f"{where} takes the logarithm of 0: -inf in forward, and its derivative "
                                         "1/x is infinite there")
    if fresh and dtype in _HALF:
        top = "65504" if dtype == "float16" else "3.4e38"
        return WatchCause("float16_overflow", f"{where} overflows {dtype}: a value passes its largest finite value "
                                              f"{top} and becomes inf (compute it in float32, or scale it down)")
    if fresh:
        return WatchCause("overflow", f"{where} overflows {dtype or 'its dtype'} to inf from finite inputs")
    return WatchCause("unexplained", f"{where} is the first operation whose output holds {kind}")


def backward_cause(node: Any, reasoned: Any) -> WatchCause:
    """Why the first non-finite gradient left `node`: a user's Function, or verify/causes'
    reasoning (`reasoned`, a Cause or None)."""
    forward_cls = getattr(type(node), "_forward_cls", None)
    if forward_cls is not None:
        return WatchCause("custom_backward", (
            f"the backward of your autograd.Function {forward_cls.__name__} returns nan or inf although the "
            "gradient arriving at it is finite (gradcli check-function compares it with finite differences)"))
    if reasoned is None:
        return WatchCause("unexplained", f"the first non-finite gradient leaves {node.name()}")
    kind = _NODE_KINDS.get(reasoned.kind, "unexplained")
    if kind == "overflow" and any(f"in {half}" in reasoned.summary for half in _HALF):
        kind = "float16_overflow"
    return WatchCause(kind, reasoned.summary)  # type: ignore[arg-type]
