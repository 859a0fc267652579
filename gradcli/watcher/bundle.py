"""`--save DIR`: the stopped step, written so that it can be looked at again offline.

DIR/step.pt (torch.save) holds each model's weights and buffers (state_dict, by the model's
name), the optimizer's state_dict, every top-level call of the step (its model, arguments,
the random state before it, and the gradient that arrived at its outputs in backward) and the
losses backward ran on; DIR/step.json says which step, which optimizer, and what the stop
found. `load_bundle(DIR)` reads it back; `restore(bundle, model, optimizer)` puts a model and an
optimizer of the same shape into the state of the stopped step (step-1 updates applied).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch


def save_bundle(folder: Path, watch: Any, optimizer: torch.optim.Optimizer, stop: Any) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    names = watch._module_names()
    models = {names.get(id(m), "") or type(m).__name__: m for m in watch.tops.values()}
    payload = {
        "step": stop.step,
        "weights": {name: {k: v.detach().clone() for k, v in m.state_dict().items()} for name, m in models.items()},
        "optimizer": optimizer.state_dict(),
        "calls": [{"model": names.get(id(c.module), "") or type(c.module).__name__, "args": _detached(c.args),
                   "kwargs": _detached(c.kwargs or {}), "rng": c.rng,
                   "output_grads": [g.detach() if g is not None else None for g in c.grads]} for c in watch.calls],
        "losses": [loss.detach() for loss in watch.losses],
        "rng": torch.get_rng_state(),
    }
    torch.save(payload, folder / "step.pt")
    (folder / "step.json").write_text(json.dumps({
        "step": stop.step, "optimizer": stop.optimizer, "models": sorted(models), "stop": stop.as_dict(),
        "how": "torch.load('step.pt'): weights, optimizer, calls (args, kwargs, rng, output_grads), losses, rng",
    }, indent=2) + "\n", encoding="utf-8")


def load_bundle(folder: str | Path) -> dict[str, Any]:
    return torch.load(Path(folder) / "step.pt", weights_only=False)


def restore(bundle: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
            name: str | None = None) -> None:
    """Load the stopped step's weights (of the model called `name`, or the only one) and optimizer state."""
    weights = bundle["weights"]
    key = name if name is not None else next(iter(weights))
    model.load_state_dict(weights[key])
    if optimizer is not None:
        optimizer.load_state_dict(bundle["optimizer"])


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_detached(v) for v in value]
    return value
