"""One observer of a forward pass: gradcli subclasses torch's TorchFunctionMode exactly once.

Trace's recorder (targets/record.py), grads' observer (health/observe.py) and the cause
finder's call log (graph/evidence.py) all listen through that one mode; and the user's line
they report is one type (targets/base.py's Origin). Read from the source with `ast`, and
checked at run time: a model's forward seen through two listeners at once gives both the
same calls, and grads' observer still names the cut and the user's line.
"""

from __future__ import annotations

import ast

import torch
from torch import nn
from paths import ROOT

PACKAGE = ROOT / "gradcli"


def _subclasses_of(name: str) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
                if name in bases:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    return found


#: Modes that rewrite calls to try a fix on the user's model (a finite mask fill, zeroed
#: fully-masked softmax rows) and are proven by rerunning it; they record nothing.
FIX_TRIALS = ["verify/causes/masked_rows.py:_FiniteFill", "verify/causes/masked_rows.py:_ZeroMaskedRows"]


#: watch's line notes (one base, two modes): during one step of a training run, the user's line of a few named calls
#: (softmax and the losses in the first step; an in-place write to a parameter after a suspicion),
#: against the result's grad_fn or the parameter. Not observers of a forward (no modules, no cuts,
#: no values): the recorder would cost a whole step's recording for a line.
WATCH_LINES = ["watcher/events/opsites.py:LineNotes"]  # OpSites and outside.py's InPlaceSites


def test_exactly_one_class_subclasses_torch_function_mode_to_record():
    assert _subclasses_of("TorchFunctionMode") == sorted(["targets/record.py:Mode", *FIX_TRIALS, *WATCH_LINES])
    for name in FIX_TRIALS:  # a fix trial only calls func with changed arguments: no listener, no log
        path, _, cls = name.partition(":")
        text = (PACKAGE / path).read_text(encoding="utf-8")
        body = text[text.index(f"class {cls}("):]
        body = body[: body.find("\n\n\n")]
        assert "listener" not in body and "append" not in body


def test_one_user_line_type():
    # health's Source was a second spelling of a user's line; only Origin is left.
    assert not (PACKAGE / "health" / "source.py").exists()
    assert _subclasses_of("Source") == []
    assert not any("class Source" in p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))


class _Log:
    def __init__(self) -> None:
        self.names: list[str] = []

    def before(self, func, args):
        return None

    def called(self, func, args, kwargs, result, before):
        self.names.append(getattr(func, "__name__", repr(func)))


def test_two_listeners_hear_the_same_calls_and_the_observer_still_sees_a_cut():
    from gradcli.health.observe import ForwardObserver
    from gradcli.targets.record import watching

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 1)

        def forward(self, x):
            return self.b(torch.tanh(self.a(x)).detach())  # the detach cuts self.a off the loss

    torch.manual_seed(0)
    model, x = Net(), torch.randn(4, 3)
    first, second = _Log(), _Log()
    with watching(first), watching(second):
        model(x)
    assert first.names and first.names == second.names
    assert {"linear", "tanh", "detach"} <= set(first.names)
    with ForwardObserver(model) as watch:
        model(x)
    (cut,) = [c for c in watch.record.cuts if c.op == "detach"]
    assert cut.kind == "detach" and cut.module == ""
    assert cut.source is not None and cut.source.file == __file__ and "detach" in cut.source.code
    assert str(cut.source).startswith("test_recorder.py:")


def test_the_recorder_hears_the_models_calls_and_not_its_own_shape_reads():
    # The module hooks read every module's input and output shapes while the mode is on; those
    # reads are gradcli's, not the model's. The truth: torch's own TorchFunctionMode, with no
    # hooks, on the same forward.
    from torch.overrides import TorchFunctionMode

    from gradcli.targets.record import ForwardRecorder

    class Seen(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.names.append(getattr(func, "__name__", repr(func)))
            return func(*args, **(kwargs or {}))

    class Heard(ForwardRecorder):
        def called(self, func, args, kwargs, result, before):
            self.heard.append(getattr(func, "__name__", repr(func)))
            super().called(func, args, kwargs, result, before)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.GELU(), nn.Linear(4, 2))
    x = torch.randn(3, 4)
    with Seen() as seen:
        model(x)
    recorder = Heard({id(m): path for path, m in model.named_modules()})
    recorder.heard = []
    with recorder:
        model(x)
    assert recorder.heard == seen.names and "__get__" not in recorder.heard
    run = recorder.recording.modules["1"]
    assert (run.cls, run.inputs, run.output) == ("LayerNorm", [[3, 4]], [[3, 4]])
    assert recorder.recording.modules[""].output == [[3, 2]]
