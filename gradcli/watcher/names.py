"""What a watched run's modules and parameters are called: their paths in the models found,
prefixed by the model's class when a run has several (a GAN's `Generator.0.weight`)."""

from __future__ import annotations

from typing import Any


class Names:
    """Built from the models (`tops`, id -> module); `refresh()` when one is added. A `root`
    (a LightningModule whose training_step calls its own `self.net`) names them from itself."""

    def __init__(self, tops: dict[int, Any], root: Any = None) -> None:
        self.tops, self.root = tops, root
        self._modules: dict[int, str] | None = None
        self._params: dict[int, str] | None = None

    def refresh(self) -> None:
        self._modules = self._params = None

    @property
    def modules(self) -> dict[int, str]:
        """id(module) -> its path."""
        if self._modules is None:
            several = len(self.tops) > 1
            self._modules = {}
            if self.root is not None:
                self._modules.update((id(module), path) for path, module in self.root.named_modules())
            for top in self.tops.values():
                prefix = type(top).__name__ if several else ""
                for path, module in top.named_modules():
                    self._modules.setdefault(id(module), ".".join(p for p in (prefix, path) if p))
        return self._modules

    def parameters(self, params: list[Any]) -> list[str]:
        """Each parameter's path; `param{i}` for one that belongs to no model found."""
        if self._params is None:
            self._params = {id(p): name for name, (p, _module) in self._owned().items()}
        return [self._params.get(id(p), f"param{i}") for i, p in enumerate(params)]

    def owners(self) -> dict[str, tuple[str, str]]:
        """parameter path -> (its module's path, the module's class)."""
        return {name: (self.modules[id(module)], type(module).__name__) for name, (_p, module) in self._owned().items()}

    def _owned(self) -> dict[str, tuple[Any, Any]]:
        found: dict[str, tuple[Any, Any]] = {}
        for top in self.tops.values():
            for module in top.modules():
                for name, p in module.named_parameters(recurse=False):
                    found.setdefault(".".join(x for x in (self.modules[id(module)], name) if x), (p, module))
        return found


def module_of(parameter: str) -> str | None:
    """The module path of a parameter path (None for one that belongs to no model found)."""
    return parameter.rpartition(".")[0] if parameter and not parameter.startswith("param") else None
