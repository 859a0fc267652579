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
import pickle
from pathlib import Path
from typing import Any

import torch

from .calls import detached


def save_bundle(folder: Path, watch: Any, optimizer: torch.optim.Optimizer, stop: Any,
                script: Any = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    names = watch.names.modules
    models = {names.get(id(m), "") or type(m).__name__: m for m in watch.tops.values()}
    payload = {
        "step": stop.step,
        "models": models,
        "script": None if script is None else {"path": script.path, "module": script.module},
        "weights": {name: {k: v.detach().clone() for k, v in m.state_dict().items()} for name, m in models.items()},
        "optimizer": optimizer.state_dict(),
        "calls": [{"model": names.get(id(c.module), "") or type(c.module).__name__, "args": detached(c.args),
                   "kwargs": detached(c.kwargs or {}), "rng": c.rng,
                   "output_grads": [g.detach() if g is not None else None for g in c.grads]} for c in watch.calls],
        "losses": [loss.detach() for loss in watch.losses],
        "rng": torch.get_rng_state(),
        "rows": stop.rows,  # which rows of the batch carry the step (watcher/rows/)
    }
    hooks = watch._top_hooks  # watch's own hooks on the models cannot be pickled: off while saving
    if hooks is not None:
        hooks.__exit__(None, None, None)
    try:
        torch.save(payload, folder / "step.pt")
    except (AttributeError, TypeError, pickle.PicklingError) as err:  # a model holding an unpicklable hook
        payload["models"] = {}
        payload["models_not_saved"] = f"{type(err).__name__}: {err}"
        torch.save(payload, folder / "step.pt")
    finally:
        if hooks is not None:
            hooks.__enter__()
    (folder / "replay.py").write_text(_REPLAY.format(step=stop.step, optimizer=stop.optimizer), encoding="utf-8")
    (folder / "step.json").write_text(json.dumps({
        "step": stop.step, "optimizer": stop.optimizer, "models": sorted(models), "stop": stop.as_dict(),
        "script": payload["script"],
        "how": "torch.load('step.pt'): weights, optimizer, calls (args, kwargs, rng, output_grads), losses, rng",
    }, indent=2) + "\n", encoding="utf-8")


_REPLAY = '''"""gradcli watch --save: step {step} of {optimizer}, stopped before it was applied.

    gradcli trace replay.py:step --flow
    gradcli grads replay.py:step
"""

from gradcli.watcher.bundle import ReplayedStep

step = ReplayedStep(__file__)
'''


def load_bundle(folder: str | Path) -> dict[str, Any]:
    """step.pt, with the models of a training script's own `__main__` found again."""
    import json as json_module
    import types

    folder = Path(folder)
    summary = json_module.loads((folder / "step.json").read_text(encoding="utf-8"))
    main: dict[str, Any] | None = None

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            nonlocal main
            if module == "__main__":
                if main is None:
                    main = _script_definitions(summary.get("script"))
                if name in main:
                    return main[name]
            return super().find_class(module, name)

    pickle_module = types.SimpleNamespace(Unpickler=Unpickler, load=pickle.load, __name__="pickle")
    return torch.load(folder / "step.pt", weights_only=False, pickle_module=pickle_module)


def _script_definitions(script: dict[str, Any] | None) -> dict[str, Any]:
    """The training script's top-level names, run as an import runs it (not as __main__)."""
    import runpy

    if not script:
        return {}
    if script.get("path"):
        return runpy.run_path(script["path"], run_name="__gradcli_bundle__")
    return runpy.run_module(script["module"], run_name="__gradcli_bundle__")


class ReplayedStep(torch.nn.Module):
    """The stopped step as a module (see above): its models are submodules, named as in the run."""

    def __init__(self, where: str | Path) -> None:
        super().__init__()
        folder = Path(where)
        folder = folder.parent if folder.is_file() else folder
        bundle = load_bundle(folder)
        self.models = torch.nn.ModuleDict({_key(name): model for name, model in bundle["models"].items()})
        self._names = {name: _key(name) for name in bundle["models"]}
        self._calls = bundle["calls"]

    def forward(self) -> torch.Tensor:
        from .calls import output_tensors

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
