"""THE observer of modules, beside record.py's one recorder of torch calls: the one place that
hooks every module's forward, keeps the stack of modules running, and says what a module's
calls were (`ModuleRun`).

trace and memory (record.py), grads (health/observe.py), memory's checkpoint advice
(footprint/checkpoint.py) and compare (comparison/side.py) each read what they need from it:
`enter(path, module, args)` before a module's forward, `leave(path, module, args, output)`
after it (also when forward raised, so the stack stays right), `current` the innermost
running module. Backward is reached from there: a `leave` that registers a hook on the output
tensor (compare's watched run) hears the gradient leaving the module.

Two ways to install, one behaviour:
- every module torch runs (`names` maps id(module) -> path; a module not in it, a loss module
  called in the loss, gets `unknown(module)` or is not observed): torch's process-wide hooks,
  two handles whatever the model's size;
- the given `modules` only, as (path, module) pairs: a hook per module (only `leave`'s when
  there is no `enter`), and with `eager` run by Python even inside torch.compile (dynamo would compile a hook once per module path and hit
  its recompile limit: a ResNet's watched inductor run took 25 minutes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

Enter = Callable[[str, Any, Any], None]
Leave = Callable[[str, Any, Any, Any], None]


@dataclass
class ModuleRun:
    """A module's calls in one forward: its class, the shapes of its first call's inputs and
    output, and the first and last operation numbers over all its calls (when counted)."""

    path: str
    cls: str
    inputs: list[list[int]] = field(default_factory=list)
    output: list[list[int]] = field(default_factory=list)
    first: int | None = None  # the number of the first torch call inside it (health/observe.py)
    last: int | None = None
    calls: int = 0


class ModuleHooks:
    """Context manager: `enter` and `leave` around every observed module's forward; `current`
    is the innermost running module's path (None outside every module)."""

    def __init__(self, *, names: dict[int, str] | None = None, modules: Iterable[tuple[str, Any]] | None = None,
                 enter: Enter | None = None, leave: Leave | None = None,
                 unknown: Callable[[Any], str] | None = None, eager: bool = False, kwargs: bool = False) -> None:
        """With `kwargs`, `leave` is called as leave(path, module, args, kwargs, output): the
        keyword arguments of the call too (watch replays a step's calls with them)."""
        if (names is None) == (modules is None):
            raise ValueError("ModuleHooks observes either every module torch runs (names) or the given modules")
        self.names, self.modules = names, None if modules is None else list(modules)
        self._enter, self._leave, self._unknown, self._eager = enter, leave, unknown, eager
        self._kwargs = kwargs
        self.stack: list[str] = []
        self._handles: list[Any] = []

    @property
    def current(self) -> str | None:
        return self.stack[-1] if self.stack else None

    def __enter__(self) -> "ModuleHooks":
        if self.modules is None:
            from torch.nn.modules import module as nn_module

            post = self._post_kwargs if self._kwargs else self._post
            self._handles = [nn_module.register_module_forward_pre_hook(self._pre),
                             nn_module.register_module_forward_hook(post, always_call=True, with_kwargs=self._kwargs)]
            return self
        # Given modules and no `enter`: no pre-hooks at all (under torch.compile each hook run by
        # Python is a graph break), and then no stack either.
        for path, module in self.modules:
            pre = lambda m, args, path=path: self._entering(path, m, args)  # noqa: E731
            if self._kwargs:
                post = lambda m, args, kwargs, out, path=path: self._leaving(path, m, args, out, kwargs)  # noqa: E731
            else:
                post = lambda m, args, out, path=path: self._leaving(path, m, args, out)  # noqa: E731
            if self._eager:
                import torch._dynamo as dynamo

                pre, post = dynamo.disable(pre), dynamo.disable(post)
            if self._enter is not None:
                self._handles.append(module.register_forward_pre_hook(pre))
            self._handles.append(module.register_forward_hook(post, always_call=True, with_kwargs=self._kwargs))
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        if self.modules is None and self._kwargs:
            # torch's handle of a process-wide forward hook registered with_kwargs forgets that
            # flag's entry (torch 2.14): left behind, it makes every later torch.compile warn
            # of global hooks on modules.
            from torch.nn.modules import module as nn_module

            for handle in self._handles:
                nn_module._global_forward_hooks_with_kwargs.pop(handle.id, None)
        self._handles.clear()
        self.stack.clear()

    # -- the process-wide hooks: a module's path from `names` --------------------------------
    def _path(self, module: Any) -> str | None:
        path = self.names.get(id(module)) if self.names is not None else None
        if path is None and self._unknown is not None:
            path = self._unknown(module)
        return path

    def _pre(self, module: Any, args: Any) -> None:
        path = self._path(module)
        if path is not None:
            self._entering(path, module, args)

    def _post(self, module: Any, args: Any, output: Any) -> None:
        path = self._path(module)
        if path is not None:
            self._leaving(path, module, args, output)

    def _post_kwargs(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        path = self._path(module)
        if path is not None:
            self._leaving(path, module, args, output, kwargs)

    # -- one module --------------------------------------------------------------------------
    def _entering(self, path: str, module: Any, args: Any) -> None:
        self.stack.append(path)
        if self._enter is not None:
            self._enter(path, module, args)

    def _leaving(self, path: str, module: Any, args: Any, output: Any, kwargs: Any = None) -> None:
        if self.stack and self.stack[-1] == path:
            self.stack.pop()
        if self._leave is not None:
            if self._kwargs:
                self._leave(path, module, args, kwargs, output)  # type: ignore[call-arg]
            else:
                self._leave(path, module, args, output)
