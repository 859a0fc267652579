"""Every kind of finding a watched run can report, and its words: written here once, read by the
result's problem sentences (result.py), the text report (render/training/watch.py) and the docs'
tests. A kind is a *finding* (the run is learning wrong: exit status 1) or a *warning* (worth a
look, but healthy runs show it too: reported, exit status unchanged; docs/commands/watch.md
lists which is which)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FindingKind = Literal[
    # the gradients' health (health.py) and the spikes (spikes.py, precursors.py)
    "loss_spike", "grad_spike", "layer_spike", "adam_ratio", "no_gradient", "dead", "vanishing", "exploding",
    # the silent training bugs (detectors/)
    "carried_gradients", "no_optimizer", "zeroed_before_step", "activation_twice", "probabilities_to_nll",
    "broadcast_target", "eval_mode", "learning_rate", "update_ratio", "loss_climbs", "loss_flat", "clip_before_unscale",
    "changed_outside", "identical_units",
]


@dataclass(frozen=True)
class Words:
    label: str  # the report's column: short
    sentence: str  # "step 12: <sentence> on fc1.weight"
    fix: str  # one line: what would fix it
    warning: bool = False  # reported, but does not make the run fail


WORDS: dict[str, Words] = {
    "loss_spike": Words("loss spike", "a loss spike", "look at the batch of that step (gradcli watch --save DIR)",
                        warning=True),
    "grad_spike": Words("gradient-norm spike", "a gradient-norm spike",
                        "look at the batch of that step (gradcli watch --save DIR)", warning=True),
    "layer_spike": Words("layer gradient-norm spike", "a layer's gradient-norm spike",
                         "look at the batch of that step (gradcli watch --save DIR)", warning=True),
    "adam_ratio": Words("g² far above Adam's v", "gradients far above Adam's second moment",
                        "a lower learning rate, a longer warmup, or gradient clipping", warning=True),
    "no_gradient": Words("no gradient", "no gradient",
                         "use the parameter in forward, or leave it out of the optimizer (requires_grad_(False))"),
    "dead": Words("all-zero gradient (dead)", "an all-zero gradient, step after step (dead)",
                  "re-initialise the layer, or a lower learning rate"),
    "vanishing": Words("vanishing", "a vanishing gradient", "see gradcli grads on one step of the model"),
    "exploding": Words("exploding", "an exploding gradient", "gradient clipping, or a lower learning rate"),
    "carried_gradients": Words(
        "gradients carried over", "gradients carried over from the previous step (no zero_grad())",
        "call optimizer.zero_grad() once per step, before backward() (after step() when accumulating on purpose)"),
    "no_optimizer": Words(
        "gradient, no optimizer", "parameters that get gradients but that no optimizer updates",
        "build the optimizer from every trained parameter (model.parameters()); keep layers in nn.ModuleList, "
        "not a Python list"),
    "zeroed_before_step": Words(
        "zero_grad() before step()", "zero_grad() between backward() and step(): the step saw no gradient",
        "call zero_grad() before backward() or after step(), not between them"),
    "activation_twice": Words(
        "activation applied twice", "the loss applies softmax or sigmoid to outputs that already went through it",
        "give the loss the logits (drop the softmax/sigmoid before it), or use nll_loss on log_softmax"),
    "probabilities_to_nll": Words(
        "softmax into nll_loss", "nll_loss is given probabilities (softmax) where it takes log-probabilities",
        "use log_softmax before nll_loss (nn.LogSoftmax with nn.NLLLoss), or cross_entropy on the logits"),
    "broadcast_target": Words(
        "loss broadcasts its target", "the loss broadcast its input against a target of another shape",
        "make the target's shape the output's (target.view_as(output), or output.squeeze(-1))"),
    "eval_mode": Words(
        "training in eval mode", "the model is in eval() mode while the optimizer trains it",
        "call model.train() before the training steps (after each validation pass)"),
    "learning_rate": Words(
        "learning rate collapsed", "the learning rate collapsed (or exploded) during the run",
        "step the scheduler as it was built for (per epoch, not per batch), or build it for the run's steps"),
    "clip_before_unscale": Words(
        "clipping scaled gradients", "gradients were clipped while still multiplied by GradScaler's scale",
        "call scaler.unscale_(optimizer) before clipping, then scaler.step(optimizer)"),
    "changed_outside": Words(
        "changed outside the optimizer",
        "parameters were re-initialised or put back from a copy between two steps, undoing the optimizer's updates",
        "initialise or load the weights once, before the loop (if this is meant, e.g. a reset, ignore it)"),
    "identical_units": Words(
        "identical units", "units of a layer started equal and stay copies of one another (a constant initialisation)",
        "initialise the weight randomly (leave torch's default, or nn.init.kaiming_uniform_), not with a constant"),
    "update_ratio": Words(
        "updates far off the weights' size",
        "the optimizer's updates are far too small for any layer to learn, or far too large for the loss to settle "
        "(‖Δw‖/‖w‖ per step)",
        "a learning rate nearer the usual for this optimizer: raise it when nothing learns, lower it (or add warmup) "
        "when the updates are too large"),
    "loss_climbs": Words("loss climbs", "the loss climbed over the run, without nan",
                         "look at the other findings; else a lower learning rate"),
    "loss_flat": Words("loss never falls", "the loss has not fallen since the run began",
                       "look at the other findings; else a larger learning rate, or what cuts the model from its loss",
                       warning=True),
}

