"""targets/modules.py: the one installer of module hooks, its stack and what it leaves behind.

The truth is torch's: the order in which nn.Module calls run (a hand-written model whose
forward says which submodule it calls), the exception a forward raises, and the hook
dictionaries torch keeps on each module.
"""

from __future__ import annotations

import ast

import pytest
import torch
from torch import nn

from gradcli.targets.modules import ModuleHooks
from paths import ROOT

PACKAGE = ROOT / "gradcli"


class Inner(nn.Module):
    def __init__(self, fail: bool = False):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.fail = fail

    def forward(self, x):
        if self.fail:
            raise RuntimeError("inner forward failed")
        return self.fc(x)


class Outer(nn.Module):
    def __init__(self, fail: bool = False):
        super().__init__()
        self.inner = Inner(fail)
        self.head = nn.Linear(2, 1)

    def forward(self, x):
        return self.head(self.inner(x))


def _events(model, **options):
    names = {id(m): path for path, m in model.named_modules()}
    events, stacks = [], []
    hooks = ModuleHooks(names=names, enter=lambda p, m, a: (events.append(("enter", p)), stacks.append(list(hooks.stack))),
                        leave=lambda p, m, a, o: events.append(("leave", p)), **options)
    return hooks, events, stacks


def test_every_module_call_is_entered_and_left_in_torch_s_order_with_the_stack_of_running_modules():
    model = Outer()
    hooks, events, stacks = _events(model)
    with hooks:
        model(torch.randn(3, 2))
        loss = nn.MSELoss()(torch.zeros(1), torch.ones(1))  # a module outside the model: not observed
    assert loss.item() == 1.0
    assert events == [("enter", ""), ("enter", "inner"), ("enter", "inner.fc"), ("leave", "inner.fc"), ("leave", "inner"),
                      ("enter", "head"), ("leave", "head"), ("leave", "")]
    assert stacks == [[""], ["", "inner"], ["", "inner", "inner.fc"], ["", "head"]]
    assert hooks.current is None


def test_a_raising_forward_still_leaves_and_the_hooks_are_gone_afterwards():
    model = Outer(fail=True)
    hooks, events, _ = _events(model)
    with hooks, pytest.raises(RuntimeError, match="inner forward failed"):
        model(torch.randn(3, 2))
    assert events[-2:] == [("leave", "inner"), ("leave", "")] and hooks.stack == []
    events.clear()
    model.inner.fail = False
    model(torch.randn(3, 2))  # outside the context: nothing observed
    assert events == []


def test_given_modules_get_their_own_hooks_and_no_pre_hook_without_enter():
    model = Outer()
    seen = []
    with ModuleHooks(modules=[("head", model.head)], leave=lambda p, m, a, o: seen.append((p, tuple(o.shape)))):
        assert len(model.head._forward_hooks) == 1 and len(model.head._forward_pre_hooks) == 0
        assert len(model.inner._forward_hooks) == 0
        model(torch.randn(3, 2))
    assert seen == [("head", (3, 1))]
    assert len(model.head._forward_hooks) == 0


def test_no_other_module_of_the_package_installs_module_hooks():
    # One observer of modules: every other module asks modules.py instead of hooking itself.
    installers = ("register_forward_hook", "register_forward_pre_hook", "register_module_forward_hook",
                  "register_module_forward_pre_hook", "register_full_backward_hook", "register_module_full_backward_hook")
    found = sorted(
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in PACKAGE.rglob("*.py") if path.name != "modules.py" or path.parent.name != "targets"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr in installers
    )
    assert found == []
