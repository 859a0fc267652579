"""Training in eval mode: the model an optimizer trains is in `eval()` while its steps go on.

Its dropout draws nothing and its BatchNorm normalises with running statistics: the run trains
another model than the one written. Read at each check from the models themselves (a flag each,
no tensor touched): a model (a top-level module the run calls) that holds the optimizer's
parameters, with `training` False, and holding modules that behave otherwise in eval (dropout,
batch or instance norm that tracks statistics). Chosen modules set to eval inside a model in
training mode (a frozen BatchNorm while fine-tuning) are the user's choice, not a finding. The
line is the model's last `eval()` / `train(False)` call (events/methods.py).
"""

from __future__ import annotations

from torch import nn

from .found import Found
from .protocol import CheckedStep, Detector

#: Modules whose forward differs between train() and eval().
_MODAL = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)


def _modal(module: nn.Module) -> bool:
    if isinstance(module, nn.modules.instancenorm._InstanceNorm):
        return module.track_running_stats
    if isinstance(module, (nn.RNNBase, nn.MultiheadAttention)):
        return bool(getattr(module, "dropout", 0))
    return isinstance(module, _MODAL)


class EvalMode(Detector):
    def __init__(self) -> None:
        self.trained: dict[int, list[nn.Module]] = {}  # id(optimizer) -> the models holding its parameters
        self.modal: dict[int, list[tuple[str, nn.Module]]] = {}  # id(model) -> its modal modules, named
        self.reported: set[int] = set()

    def check(self, step: CheckedStep) -> list[Found]:
        models = self.trained.get(id(step.optimizer))
        if models is None:
            models = self.trained[id(step.optimizer)] = self._models(step)
        found = []
        for model in models:
            if model.training or id(model) in self.reported:
                continue
            inert = [(name, m) for name, m in self.modal[id(model)] if not m.training]
            if not inert:
                continue
            self.reported.add(id(model))
            _, site = step.run.events.modes.get(id(model), (False, None))
            found.append(Found("eval_mode", [], {"model": type(model).__name__,
                                                "modules_in_eval": [type(m).__name__ for _, m in inert]},
                               modules=[name for name, _ in inert], site=site))
        return found

    def _models(self, step: CheckedStep) -> list[nn.Module]:
        held = {id(p) for p in step.params}
        models = []
        for top in step.run.tops.values():
            if any(id(p) in held for p in top.parameters()):
                models.append(top)
                names = step.run.names.modules
                self.modal[id(top)] = [(names.get(id(m), type(m).__name__), m) for m in top.modules() if _modal(m)]
        return models
