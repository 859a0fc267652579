"""`--save DIR`: the stopped step, written so that it can be looked at again offline.

DIR/step.pt holds each model (its structure and weights, structure.py), each model's weights
and buffers again as a state_dict (by the model's name), the optimizer's state_dict, every
top-level call of the step (its model, arguments, the random state before it, and the
gradient that arrived at its outputs in backward) and the losses backward ran on, all as data
that `torch.load(DIR/"step.pt", weights_only=True)` reads; DIR/step.json says which step, which
optimizer, and what the stop found. `load_bundle(DIR)` reads it back and rebuilds the models
from the training script's definitions (script.definitions), without running its loop;
`restore(bundle, model, optimizer)` puts a model and an optimizer of the same shape into the
state of the stopped step (step-1 updates applied).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..calls import detached
from .structure import BundleError, Encoder, Unstorable, decode, resolver

#: step.pt's layout; a bundle of another is refused with a message.
FORMAT = 2


def save_bundle(folder: Path, watch: Any, optimizer: torch.optim.Optimizer, stop: Any,
                script: Any = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    names = watch.names.modules
    models = {names.get(id(m), "") or type(m).__name__: m for m in watch.tops.values()}
    data = {
        "step": stop.step,
        "script": None if script is None else {"path": script.path, "module": script.module},
        "weights": {name: m.state_dict() for name, m in models.items()},  # (the parameters' own tensors: stored once)
        "optimizer": optimizer.state_dict(),
        "calls": [{"model": names.get(id(c.module), "") or type(c.module).__name__, "args": detached(c.args),
                   "kwargs": detached(c.kwargs or {}), "rng": c.rng,
                   "output_grads": [g.detach() if g is not None else None for g in c.grads]} for c in watch.calls],
        "losses": [loss.detach() for loss in watch.losses],
        "rng": torch.get_rng_state(),
        "rows": stop.rows,  # which rows of the batch carry the step (watcher/rows/)
    }
    encoder = Encoder()
    payload: dict[str, Any] = {"format": FORMAT}
    try:
        payload["data"] = encoder.encode(data, "the step")
    except Unstorable as err:  # the step's own arguments are not data: keep the weights and the rest
        data["calls"] = []
        payload["data"] = encoder.encode(data, "the step")
        payload["calls_not_saved"] = str(err)
    try:
        payload["models"] = encoder.encode(models, "the model")
    except Unstorable as err:
        payload["models"] = encoder.encode({}, "")
        payload["models_not_saved"] = str(err)
    payload["tensors"] = encoder.tensors
    torch.save(payload, folder / "step.pt")
    (folder / "replay.py").write_text(_REPLAY.format(step=stop.step, optimizer=stop.optimizer), encoding="utf-8")
    (folder / "step.json").write_text(json.dumps({
        "step": stop.step, "optimizer": stop.optimizer, "models": sorted(models), "stop": stop.as_dict(),
        "script": data["script"],
        "models_not_saved": payload.get("models_not_saved"), "calls_not_saved": payload.get("calls_not_saved"),
        "how": "torch.load('step.pt', weights_only=True): data (weights, optimizer, calls with args, kwargs, rng and "
               "output_grads, losses, rng) and models as tagged dicts over tensors; gradcli.watcher.bundle.load_bundle "
               "rebuilds them",
    }, indent=2) + "\n", encoding="utf-8")


_REPLAY = '''"""gradcli watch --save: step {step} of {optimizer}, stopped before it was applied.

    gradcli trace replay.py:step --flow
    gradcli grads replay.py:step
"""

from gradcli.watcher.bundle import ReplayedStep

step = ReplayedStep(__file__)
'''


def load_bundle(folder: str | Path) -> dict[str, Any]:
    """step.pt read as data (weights_only=True), with the models rebuilt from the training
    script's definitions: its imports, classes and functions, never its other statements."""
    from ..script import Script, definitions

    folder = Path(folder)
    summary = json.loads((folder / "step.json").read_text(encoding="utf-8"))
    payload = torch.load(folder / "step.pt", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise BundleError(f"{folder / 'step.pt'} is not a bundle this gradcli reads (format {FORMAT}): save it again "
                          "with gradcli watch --save")
    script = summary.get("script") or {}

    def script_definitions() -> dict[str, Any]:
        if not script.get("path") and not script.get("module"):
            raise BundleError("the bundle's model is defined in a script's __main__, and the bundle names no script")
        return definitions(Script(script.get("path"), script.get("module")))

    resolve = resolver(script_definitions)
    bundle = decode(payload["data"], payload["tensors"], resolve)
    bundle["models"] = decode(payload["models"], payload["tensors"], resolve)
    for key in ("models_not_saved", "calls_not_saved"):
        if key in payload:
            bundle[key] = payload[key]
    return bundle


class ReplayedStep(torch.nn.Module):
    """The stopped step as a module (see above): its models are submodules, named as in the run."""

    def __init__(self, where: str | Path) -> None:
        super().__init__()
        folder = Path(where)
        folder = folder.parent if folder.is_file() else folder
        bundle = load_bundle(folder)
        if "models_not_saved" in bundle:
            raise BundleError(f"the bundle in {folder} holds the step's weights but not its models, which could not be "
                              f"written as data: {bundle['models_not_saved']}")
        self.models = torch.nn.ModuleDict({_key(name): model for name, model in bundle["models"].items()})
        self._names = {name: _key(name) for name in bundle["models"]}
        self._calls = bundle["calls"]

    def forward(self) -> torch.Tensor:
        from ..calls import output_tensors

        total = torch.zeros(())
        for call in self._calls:
            model = self.models[self._names[call["model"]]]
            with torch.random.fork_rng(devices=[]):
                torch.random.set_rng_state(call["rng"])
                out = model(*call["args"], **call["kwargs"])
            tensors = [t for t in output_tensors(out) if t.requires_grad]
            for tensor, grad in zip(tensors, call["output_grads"]):
                if grad is not None:
                    total = total + (tensor * grad).sum()
        return total


def restore(bundle: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
            name: str | None = None) -> None:
    """Load the stopped step's weights (of the model called `name`, or the only one) and optimizer state."""
    weights = bundle["weights"]
    key = name if name is not None else next(iter(weights))
    model.load_state_dict(weights[key])
    if optimizer is not None:
        optimizer.load_state_dict(bundle["optimizer"])


def _key(name: str) -> str:
    """A ModuleDict key for a model's name (no dots)."""
    return name.replace(".", "_") or "model"
