"""What a watched run's modules and parameters are called: as `named_parameters()` and
`named_modules()` name them in the model that holds them.

- Wrappers are seen through: a `torch.compile`d model's `_orig_mod.` and DDP's `module.` are not
  part of a name.
- A run with several models (a GAN, a student and its EMA teacher, two models of one class)
  names an optimizer's parameters without a prefix when they all lie in one model (the usual
  case: the teacher is in no optimizer); otherwise each model's label comes first: its class,
  `Class#2` for a second model of the same class. Module paths carry the label for every model
  but the largest (the one the run trains, usually).
- A parameter in no module's `parameters()` (a layer kept in a plain Python list) is named by
  where it lies (`layers[0].weight`); failing that, `param{i}` (its place among those asked).
"""

from __future__ import annotations

from typing import Any


def unwrapped(module: Any) -> Any:
    """The model inside torch.compile's OptimizedModule, DDP or DataParallel."""
    import torch

    for _ in range(4):
        inner = getattr(module, "_orig_mod", None)
        if inner is None and isinstance(module, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            inner = module.module
        if not isinstance(inner, torch.nn.Module):
            return module
        module = inner
    return module


class Names:
    """Built from the models (`tops`, id -> module); `refresh()` when one is added. A `root`
    (a LightningModule whose training_step calls its own `self.net`) names them from itself."""

    def __init__(self, tops: dict[int, Any], root: Any = None) -> None:
        self.tops, self.root = tops, root
        self._modules: dict[int, str] | None = None
        self._within: dict[int, tuple[int, str]] | None = None  # id(param) -> (id(its model), its path there)
        self._labels: dict[int, str] | None = None
        self._named: tuple[tuple[int, ...], list[str]] | None = None  # the last parameters() asked, and their names

    def refresh(self) -> None:
        self._modules = self._within = self._labels = self._named = None

    def _models(self) -> list[Any]:
        seen: dict[int, Any] = {}
        for top in self.tops.values():
            model = unwrapped(top)
            seen.setdefault(id(model), model)
        return list(seen.values())

    @property
    def labels(self) -> dict[int, str]:
        """id(model) -> its label: its class, `Class#2` for the second of a class."""
        if self._labels is None:
            self._labels, counts = {}, {}
            for model in self._models():
                cls = type(model).__name__
                counts[cls] = counts.get(cls, 0) + 1
                self._labels[id(model)] = cls + (f"#{counts[cls]}" if counts[cls] > 1 else "")
        return self._labels

    @property
    def modules(self) -> dict[int, str]:
        """id(module) -> its path (the wrappers around a model named as the model)."""
        if self._modules is None:
            self._modules = {}
            if self.root is not None:
                self._modules.update((id(module), path) for path, module in unwrapped(self.root).named_modules())
            models = self._models()
            largest = max(models, key=lambda m: sum(p.numel() for p in m.parameters()), default=None)
            for model in models:
                prefix = "" if model is largest or len(models) == 1 else self.labels[id(model)]
                for path, module in model.named_modules():
                    self._modules.setdefault(id(module), ".".join(p for p in (prefix, path) if p))
            for top in self.tops.values():  # a wrapper is its model
                self._modules.setdefault(id(top), self._modules.get(id(unwrapped(top)), ""))
        return self._modules

    def parameters(self, params: list[Any]) -> list[str]:
        """Each parameter's name (the module docstring says how); an optimizer's, asked again at
        each check, are remembered."""
        key = tuple(map(id, params))
        if self._named is not None and self._named[0] == key:
            return self._named[1]
        names = self._named_now(params)
        self._named = key, names
        return names

    def _named_now(self, params: list[Any]) -> list[str]:
        within = self._parameters()
        owners = {within[id(p)][0] for p in params if id(p) in within}
        prefixed = len(owners) > 1
        names = []
        unplaced = [p for p in params if id(p) not in within]
        placed = _placed(self._models(), unplaced) if unplaced else {}
        for i, p in enumerate(params):
            if id(p) in within:
                model, path = within[id(p)]
                names.append(f"{self.labels[model]}.{path}" if prefixed else path)
            else:
                names.append(placed.get(id(p), f"param{i}"))
        return names

    def outside(self, params: list[Any]) -> list[Any]:
        """The parameters that are in no model's parameters() (a layer kept in a plain list)."""
        within = self._parameters()
        return [p for p in params if id(p) not in within]

    def owners(self, params: list[Any]) -> dict[str, tuple[str, str]]:
        """parameter name (as parameters(params) gives it) -> (its module's path, the module's class)."""
        found: dict[int, tuple[str, str]] = {}
        for model in self._models():
            for module in model.modules():
                for p in module.parameters(recurse=False):
                    found.setdefault(id(p), (self.modules.get(id(module), ""), type(module).__name__))
        return {name: found[id(p)] for name, p in zip(self.parameters(params), params) if id(p) in found}

    def _parameters(self) -> dict[int, tuple[int, str]]:
        if self._within is None:
            self._within = {}
            if self.root is not None:
                root = unwrapped(self.root)
                self.labels.setdefault(id(root), type(root).__name__)
                self._within.update((id(p), (id(root), name)) for name, p in root.named_parameters(remove_duplicate=False))
            for model in self._models():
                for name, p in model.named_parameters(remove_duplicate=False):
                    self._within.setdefault(id(p), (id(model), name))
        return self._within


def _placed(models: list[Any], params: list[Any]) -> dict[int, str]:
    """Parameters of modules kept in plain lists, tuples or dicts of a model's modules:
    `layers[0].weight` (the attribute, the index, the parameter's path in that module)."""
    import torch

    wanted = {id(p) for p in params}
    placed: dict[int, str] = {}
    for model in models:
        for path, module in model.named_modules():
            for attr, value in vars(module).items():
                items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
                for key, item in items:
                    if not isinstance(item, torch.nn.Module):
                        continue
                    where = ".".join(x for x in (path, f"{attr}[{key!r}]" if isinstance(key, str) else f"{attr}[{key}]") if x)
                    for name, p in item.named_parameters():
                        if id(p) in wanted:
                            placed.setdefault(id(p), f"{where}.{name}")
    return placed


def module_of(parameter: str) -> str | None:
    """The module path of a parameter path (None for one that belongs to no model found)."""
    if not parameter or (parameter.startswith("param") and parameter[5:].isdigit()):
        return None
    return parameter.rpartition(".")[0]
