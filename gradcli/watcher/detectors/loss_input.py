"""What the loss is given, read from the first step's graph before its backward runs (every
saved tensor still alive):

- **an activation applied twice**: `cross_entropy` applies log_softmax to what it is given, and
  `binary_cross_entropy_with_logits` a sigmoid; given probabilities (a softmax or sigmoid already
  applied, with nothing but reshapes between), the loss has a floor above zero and the gradients
  shrink. In the graph: NllLossBackward0 <- LogSoftmaxBackward0 <- SoftmaxBackward0, or
  BinaryCrossEntropyWithLogitsBackward0 <- SigmoidBackward0. `log_softmax` -> `nll_loss` and
  `log(softmax)` -> `nll_loss` put no LogSoftmaxBackward0 above the softmax and are fine.
- **probabilities given to nll_loss**: `nll_loss` takes log-probabilities; a softmax straight
  into it (NllLossBackward0 <- SoftmaxBackward0: `nn.Softmax` with `nn.NLLLoss`) is missing its
  log, and its loss is not a likelihood at all.
- **a loss that broadcasts its target**: `mse_loss` of an `[N, 1]` output against an `[N]` target
  compares every output with every target (an `[N, N]` loss). In the graph: the loss's input
  passes through ExpandBackward0, whose saved size is the output's, to the loss's saved size.

The lines are the calls' own, noted while the first step ran (events/opsites.py). A compiled
model's output is one opaque node: what made it is read from its eager original (_inside_compiled).
"""

from __future__ import annotations

from typing import Any

import torch

from ..events.opsites import Site
from .found import Found
from .protocol import Detector, Run


#: Nodes that only reshape (nothing between the two activations but these).
_RESHAPES = frozenset({"ViewBackward0", "ReshapeAliasBackward0", "UnsafeViewBackward0", "SqueezeBackward0",
                       "SqueezeBackward1", "UnsqueezeBackward0", "TransposeBackward0", "PermuteBackward0",
                       "CloneBackward0", "ToCopyBackward0", "TBackward0", "SelectBackward0", "SliceBackward0"})
#: loss node -> (the node of the activation it applies itself, the one it must not be given, the function)
_APPLIES = {"NllLossBackward0": ("LogSoftmaxBackward0", "SoftmaxBackward0", "cross_entropy"),
            "BinaryCrossEntropyWithLogitsBackward0": (None, "SigmoidBackward0", "binary_cross_entropy_with_logits")}
#: Losses that broadcast their input against their target.
_POINTWISE = frozenset({"MseLossBackward0", "L1LossBackward0", "SmoothL1LossBackward0", "HuberLossBackward0",
                        "BinaryCrossEntropyBackward0", "BinaryCrossEntropyWithLogitsBackward0"})


class LossInput(Detector):
    def __init__(self) -> None:
        self.done = False

    def backward(self, run: Run, roots: list[torch.Tensor]) -> None:
        if self.done:
            return
        self.done = True
        from ...graph.nodes import walk

        sites = run.opsites.sites if run.opsites is not None else {}
        for node in walk([getattr(r, "grad_fn", None) for r in roots]):
            name = node.name()
            if name in _APPLIES:
                self._twice(run, node, name, sites)
            if name in _POINTWISE:
                self._broadcast(run, node, name, sites)

    def _twice(self, run: Run, node: Any, name: str, sites: dict) -> None:
        own, given, function = _APPLIES[name]
        below, output = _feeding(node)
        made, site = _made(run, below, output, sites)
        if name == "NllLossBackward0" and made == "SoftmaxBackward0":  # nll_loss(softmax(z)): the log is missing
            _, loss_site, _ = sites.get(node, ("nll_loss", None, []))
            run.pending.append(Found("probabilities_to_nll", [], {"loss": "nll_loss", "activation_line": _line(site),
                                                                  "loss_line": _line(loss_site)},
                                     modules=_modules_of(run, "softmax") or None, site=site or loss_site))
            return
        if own is not None:
            if below is None or below.name() != own:
                return
            below, output = _feeding(below)
            made, site = _made(run, below, output, sites)
        if made != given:
            return
        activation = "softmax" if given == "SoftmaxBackward0" else "sigmoid"
        loss_call, loss_site, _ = sites.get(node, (function, None, []))
        run.pending.append(Found(
            "activation_twice", [], {"activation": activation, "loss": _loss_name(loss_call, function),
                                     "activation_line": _line(site), "loss_line": _line(loss_site)},
            modules=_modules_of(run, activation) or None, site=site or loss_site))

    def _broadcast(self, run: Run, node: Any, name: str, sites: dict) -> None:
        expand, _ = _first_edge(node)
        if expand is None or expand.name() != "ExpandBackward0":
            return
        try:
            output = list(expand._saved_self_sym_sizes)
            broadcast = list(node._saved_self.shape)
        except (AttributeError, RuntimeError):  # freed, or a torch that names them otherwise
            return
        if output == broadcast:
            return
        function, site, shapes = sites.get(node, (name.removesuffix("Backward0").lower(), None, []))
        # the target's own shape is the loss call's second argument's (the graph holds it expanded)
        target = shapes[1] if len(shapes) > 1 and shapes[0] == output else None
        run.pending.append(Found("broadcast_target", [], {"loss": function, "output_shape": output,
                                                          "target_shape": target, "compared_shape": broadcast},
                                 site=site))


def _first_edge(node: Any) -> tuple[Any, int]:
    """The node behind `node`'s first input, and which of that node's outputs the input is."""
    from ...graph.nodes import edges

    return (edges(node) or [(None, 0)])[0]


def _feeding(node: Any) -> tuple[Any, int]:
    """The node that made `node`'s first input, past reshapes, and which of its outputs it was."""
    return _past_reshapes(*_first_edge(node))


def _past_reshapes(node: Any, output: int = 0) -> tuple[Any, int]:
    """`node`, or the first node below it (through first inputs) that is not a reshape."""
    while node is not None and node.name() in _RESHAPES:
        node, output = _first_edge(node)
    return node, output


def _made(run: Run, node: Any, output: int, sites: dict) -> tuple[str | None, Site | None]:
    """The operation that made a loss's input, and the user line that called it. A compiled
    model's output comes from one opaque node (CompiledFunctionBackward): what made it is read
    from the model's eager original, run once on the step's own call."""
    if node is None:
        return None, None
    if "CompiledFunction" in node.name():
        return _inside_compiled(run, output)
    return node.name(), sites.get(node, (None, None, []))[1]


def _inside_compiled(run: Run, output: int) -> tuple[str | None, Site | None]:
    """Run the step's compiled call again through its eager module (once per run, only when a
    loss is fed straight from a compiled model): its output's own node, and the line that made
    it (the model's own line, else the line that called the model). The buffers are put back
    and the random state is the call's: the run goes on as it would have."""
    from ..calls import buffers_restored, output_tensors
    from ..events.opsites import OpSites
    from ..replay import eager_again, quiet_compiler

    call = next((c for c in reversed(run.calls) if hasattr(c.module, "_orig_mod") and c.kwargs is not None), None)
    if call is None or run.opsites is None:
        return None, None
    notes = OpSites(run.opsites.user_site)
    try:
        with run.paused(), buffers_restored([call.module]), quiet_compiler(), torch.enable_grad():
            out = eager_again(call, notes)
    except Exception:  # noqa: BLE001 - a model that cannot run eagerly here keeps its compiled node unread
        return None, None
    tensors = [t for t in output_tensors(out) if t.requires_grad]
    index = 0 if len(tensors) == 1 else output
    if index >= len(tensors):
        return None, None
    made, _ = _past_reshapes(tensors[index].grad_fn)
    if made is None:
        return None, None
    site = notes.sites.get(made, (None, None, []))[1]
    # no line of the model's own (nn.Sequential's): the first user frame is the loop's backward()
    return made.name(), call.site if site is None or site == run.backward_site else site


def _loss_name(called: str, function: str) -> str:
    return called if called in ("cross_entropy", "binary_cross_entropy_with_logits") else function


def _line(site: Any) -> str | None:
    return f"{site[0]}:{site[1]}" if site else None


def _modules_of(run: Run, activation: str) -> list[str]:
    """The model's own Softmax / Sigmoid modules, if it has any (the usual way this bug is written)."""
    kind = torch.nn.Softmax if activation == "softmax" else torch.nn.Sigmoid
    names = run.names.modules
    return [names.get(id(m), type(m).__name__) for top in run.tops.values() for m in top.modules() if isinstance(m, kind)]
