"""Parameters changed outside the optimizer between two steps: re-initialised every step, or
put back from a copy, so the optimizer's updates are lost.

Every in-place change of a tensor bumps its version counter (`_version`): an optimizer's update,
`nn.init.*_`, `load_state_dict`, `p.copy_(...)` and `p.clamp_(...)` under no_grad alike (not
`p.data.clamp_()`, which goes around autograd: such a change is not seen). The versions of an
optimizer's parameters are noted after its step is applied (only before a check on the health
cadence: protocol.measured) and compared at that check: a Python pass over the parameters,
~30 µs for 150 of them; once a parameter is suspected, at every check until it is judged.

A bump is only a suspicion. Many changes outside the optimizer are meant: WGAN's clamping of
the critic's weights, a max-norm renormalisation, a checkpoint loaded once to resume or to roll
back. So a suspicion is measured at the next step: the suspected parameters are cloned at the
check (c0) and after the update (c1), and at the next check, if they were changed again, the
change outside (Δ = w − c1) is set against the optimizer's own update (u = c1 − c0):

- put back: ‖Δ + u‖ ≤ RESTORED · ‖u‖ (the update undone: the weights never move);
- re-initialised: ‖Δ‖ > REPLACED · ‖c1‖ (a fresh random init moves a weight by about √2 of its norm);
- anything else is left alone: a clamp (WGAN's; every changed element now sits at the tensor's
  largest magnitude), a renormalisation, a small change. Such parameters are not suspected again.

A change that happens once (`load_state_dict` at resume, or a rollback) is not seen again at the
next check and is dropped: it is what the user asked for. An EMA teacher's parameters belong to
no optimizer and are never looked at.

The line: from the step after the suspicion until the next check, a TorchFunctionMode notes the
user's line of the in-place calls on the suspected parameters (`nn.init.xavier_uniform_`,
`load_state_dict`, `copy_`): one step in Python, and only after a suspicion.
XXX: a torch.compile'd model would trace the mode into its graph (opsites.py steps aside for
one; this mode does not yet): only after a suspicion, and for one step.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch

from ..events.opsites import LineNotes, Site
from .found import Found
from .protocol import CheckedStep, Detector, local, next_check_measured

#: A change outside the optimizer this large against the weight's norm: re-initialised.
REPLACED = 0.5
#: What is left of the optimizer's update once the outside change is added, at most: undone.
RESTORED = 0.1


class ChangedOutside(Detector):
    def __init__(self) -> None:
        self.versions: dict[int, list[int]] = {}  # id(optimizer) -> its parameters' versions after its step
        self.suspects: dict[int, dict[int, list[Any]]] = {}  # id(optimizer) -> {index: [param, c0, c1]}
        self.benign: set[int] = set()  # id() of parameters whose outside change was measured and meant
        self.sites: InPlaceSites | None = None
        self.reported = False

    def applied(self, step: CheckedStep) -> None:
        if self.reported:
            return
        key = id(step.optimizer)
        suspects = self.suspects.get(key)
        if suspects:
            with torch.no_grad():
                for entry in suspects.values():
                    entry[2] = local(entry[0].detach()).clone()
            if self.sites is None:
                self.sites = InPlaceSites(step.run.events.user_site, {id(e[0]) for e in suspects.values()}).start()
        if next_check_measured(step) or suspects:
            self.versions[key] = [p._version for p in step.params]

    def check(self, step: CheckedStep) -> list[Found]:
        key = id(step.optimizer)
        noted = self.versions.pop(key, None)
        if self.reported or noted is None or len(noted) != len(step.params):
            return []
        changed = [i for i, (p, v) in enumerate(zip(step.params, noted)) if p._version != v and id(p) not in self.benign]
        suspects = self.suspects.pop(key, None)
        if suspects is None:
            if changed:
                with torch.no_grad():
                    self.suspects[key] = {i: [step.params[i], local(step.params[i].detach()).clone(), None] for i in changed}
            return []
        sites = self._stop_sites()
        again = [i for i in changed if i in suspects and suspects[i][2] is not None]
        if not again:  # changed once (a checkpoint loaded, a rollback): meant
            return []
        found: dict[str, list[int]] = {"reinitialised": [], "restored": []}
        largest = 0.0
        for i in again:
            p, c0, c1 = suspects[i]
            verdict, relative = _judge(local(p.detach()), c0, c1)
            if verdict is None:
                self.benign.add(id(p))
                continue
            found[verdict].append(i)
            largest = max(largest, relative)
        hit = found["reinitialised"] + found["restored"]
        if not hit:
            return []
        self.reported = True
        detail = {"reinitialised": len(found["reinitialised"]), "restored": len(found["restored"]),
                  "relative_change": largest, "since_step": step.step - 1}
        site = next((s for i in hit for s in sites.get(id(step.params[i]), [])), None)
        return [Found("changed_outside", [step.names[i] for i in sorted(hit)], detail, site=site)]

    def end(self, run: Any) -> list[Found]:
        self._stop_sites()
        return []

    def _stop_sites(self) -> dict[int, list[Site]]:
        if self.sites is None:
            return {}
        self.sites.stop()
        found, self.sites = self.sites.found, None
        return found


def _judge(w: torch.Tensor, c0: torch.Tensor, c1: torch.Tensor) -> tuple[str | None, float]:
    """("reinitialised" | "restored" | None, ‖Δ‖/‖c1‖) for one parameter (above)."""
    with torch.no_grad():
        w, c0, c1 = w.double(), c0.double(), c1.double()
        delta, update = w - c1, c1 - c0
        size, moved = float(c1.norm()), float(delta.norm())
        relative = moved / size if size > 0 else float("inf") if moved > 0 else 0.0
        if moved == 0:
            return None, 0.0
        touched = delta != 0
        if bool((w[touched].abs() == w.abs().max()).all()):  # a clamp: the changed elements sit at the bound
            return None, relative
        step = float(update.norm())
        if step > 0 and float((delta + update).norm()) <= RESTORED * step:
            return "restored", relative
        if relative > REPLACED:
            return "reinitialised", relative
        return None, relative


class InPlaceSites(LineNotes):
    """`found`: id(parameter) -> the user's lines of the in-place calls made on it."""

    def __init__(self, user_site: Callable[[Any], Site | None], watched: set[int]) -> None:
        super().__init__(user_site)
        self.watched = watched
        self.found: dict[int, list[Site]] = {}

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name.endswith("_") and not name.endswith("__") and args and isinstance(args[0], torch.Tensor) \
                and id(args[0]) in self.watched:
            site = self.user_site(sys._getframe(1))
            if site is not None:
                self.found.setdefault(id(args[0]), []).append(site)
        return func(*args, **(kwargs or {}))
