"""`gradcli.memory`: what backward keeps, checked against torch itself in each test.

The truth here comes from torch, not from gradcli: a hand-written saved_tensors_hooks counter
(the total, each storage once), the nodes' own `_saved_*` attributes read without any hook
(the bytes per node), and torch.utils.checkpoint run by the test (the checkpoint's effect).
"""

from __future__ import annotations

import contextlib
import weakref

import pytest
import torch
from torch import nn

import gradcli
from gradcli.footprint.run import RUN_OPTIONS, memory_of
from gradcli.targets.model import on_python_model
from models import Cube  # a custom Function that saves its input itself


# -- the models ----------------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, dropout=0.1, batch_first=True)

    def forward(self, x):
        return self.layer(x)


class Block(nn.Module):
    def __init__(self, width=32, hidden=128):
        super().__init__()
        self.up, self.down = nn.Linear(width, hidden), nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class DeepMLP(nn.Module):
    def __init__(self, depth=6):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(depth))
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def square(out):
    return out.pow(2).mean()


MODELS = {
    "mlp": (MLP, lambda: torch.randn(5, 8)),
    "cnn": (CNN, lambda: torch.randn(2, 3, 8, 8)),
    "transformer": (Encoder, lambda: torch.randn(2, 6, 16)),
}


# -- torch's own answers, written out by hand --------------------------------------------------------
class HandCounter:
    """The saved_tensors_hooks counter one would write: every saved storage once, by address,
    counted while some graph still holds it."""

    def __init__(self):
        self.sizes, self.boxes = [], []

    def pack(self, tensor):
        box = [tensor.detach()]
        self.sizes.append((tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes()))
        self.boxes.append(weakref.ref(box := _Box(box)))
        return box

    def unpack(self, box):
        return box.value[0]

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def total(self, start=0, leave_out=()):
        alive = {ptr: size for (ptr, size), ref in zip(self.sizes[start:], self.boxes[start:]) if ref() is not None}
        return sum(size for ptr, size in alive.items() if ptr not in leave_out)


class _Box:
    def __init__(self, value):
        self.value = value


def torch_nodes(root):
    """(node name, bytes of the distinct storages it saved) for every node behind `root`, read
    from the nodes' own `_saved_*` attributes (no hooks). A multiply by a Python number keeps
    the number, which `_saved_other` hands back as a new tensor: the models here add numbers."""
    found, seen, stack = [], set(), [root]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        storages = {}
        for name in dir(node):
            # a custom Function's node is its ctx: what it saved is `saved_tensors`
            if not name.startswith("_saved_") and not (name == "saved_tensors" and hasattr(type(node), "_forward_cls")):
                continue
            values = getattr(node, name)
            for value in values if isinstance(values, (tuple, list)) else (values,):
                if isinstance(value, torch.Tensor):
                    storages[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
        if storages:
            found.append((node.name(), sum(storages.values())))
        stack.extend(fn for fn, _ in node.next_functions if fn is not None)
    return sorted(found)


def run(name, seed=0, **options):
    cls, make_input = MODELS[name]
    torch.manual_seed(seed)
    model, x = cls(), make_input()
    options.setdefault("checkpoint", 0)
    options.setdefault("create_graph", False)
    torch.manual_seed(seed)
    return model, x, gradcli.memory(model, x, loss=square, **options)


# -- saved bytes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(MODELS))
def test_saved_bytes_per_node_and_in_total_are_torchs(name):
    model, x, result = run(name)
    torch.manual_seed(0)
    counter = HandCounter()
    with counter.hooks():
        loss = square(model(x))
    assert result.saved_bytes == counter.total()
    torch.manual_seed(0)
    plain = square(model(x))  # the same forward without hooks: the nodes' own saved tensors
    assert sorted((n.node, n.bytes) for n in result.nodes) == torch_nodes(plain.grad_fn)
    # Every storage counted once in the totals, by module and by line alike.
    assert sum(t.bytes for t in result.by_module()) == result.saved_bytes
    assert sum(t.bytes for t in result.by_line()) == result.saved_bytes
    assert result.ok and result.problems == []
    del loss


def test_the_three_layer_mlp_total_by_hand():
    # Linear(8,16), ReLU, Linear(16,16), ReLU, Linear(16,4) on x of shape (5, 8), float32:
    # each Linear saves its input, each ReLU its output, and a Linear's input IS the previous
    # ReLU's output (one storage). addmm saves the weight only when its input requires grad:
    # x does not, so the first Linear's weight is not saved; the 2nd and 3rd are. The loss
    # out.pow(2).mean() saves out (PowBackward0's self).
    x_bytes = 5 * 8 * 4  # the input, saved by the first Linear
    relu_outputs = 2 * 5 * 16 * 4  # saved by each ReLU and again (same storage) by the next Linear
    weights = (16 * 16 + 16 * 4) * 4  # the 2nd and 3rd Linear's weights
    out = 5 * 4 * 4  # the loss's pow saves the output
    _, _, result = run("mlp")
    assert result.by_kind == {"input": x_bytes, "activation": relu_outputs + out, "parameter": weights}
    assert result.saved_bytes == x_bytes + relu_outputs + weights + out == 2160
    assert result.kept_bytes == relu_outputs + out
    relus = [n for n in result.nodes if n.node == "ReluBackward0"]
    linears = [n for n in result.nodes if n.node == "AddmmBackward0"]
    assert [n.bytes for n in relus] == [5 * 16 * 4] * 2
    assert sorted(n.bytes for n in linears) == sorted([x_bytes, 5 * 16 * 4 + 16 * 16 * 4, 5 * 16 * 4 + 16 * 4 * 4])
    # The Linear after each ReLU saved the same storage: counted at the ReLU, which saved it first.
    shared = [t for n in linears for t in n.tensors if t.kind == "activation"]
    assert shared and not any(t.first for t in shared)
    assert [n.module for n in result.nodes if n.node != "PowBackward0"] == ["net.0", "net.1", "net.2", "net.3", "net.4"]


def test_parameters_buffers_and_inputs_are_told_apart():
    _, _, result = run("cnn")
    kinds = {(t.kind, t.name) for _, t in result.saved() if t.name}
    assert ("input", "x") in kinds
    assert ("buffer", "features.1.running_mean") in kinds and ("buffer", "features.1.running_var") in kinds
    assert ("parameter", "features.0.weight") in kinds
    pool = next(n for n in result.nodes if n.node == "MaxPool2DWithIndicesBackward0")
    assert "int64" in {t.dtype for t in pool.tensors}  # the indices


def test_a_module_path_and_the_users_line():
    _, _, result = run("mlp")
    loss = next(n for n in result.nodes if n.node == "PowBackward0")
    assert loss.module is None and loss.file == __file__ and loss.code == "return out.pow(2).mean()"


# -- after backward, retain_graph and create_graph --------------------------------------------------
def test_retain_graph_would_keep_the_activations_and_create_graph_adds_what_torch_saves():
    torch.manual_seed(0)
    model, x = MLP(), torch.randn(5, 8)
    result = gradcli.memory(model, x, loss=square, checkpoint=0)
    # A plain backward frees every saved activation; parameters and the input stay alive.
    assert result.freed_by_backward == result.kept_bytes
    counter = HandCounter()
    with counter.hooks():
        loss = square(model(x))
        forward = len(counter.sizes)
        grads = torch.autograd.grad(loss, list(model.parameters()), create_graph=True)
    forward_storages = {ptr for ptr, _ in counter.sizes[:forward]}
    assert result.create_graph_bytes == counter.total(forward, leave_out=forward_storages) > 0
    del grads


def test_the_measured_peak_holds_the_saved_activations():
    _, _, result = run("mlp")
    assert result.peak_how == "cpu"
    assert result.peak_bytes >= result.baseline_bytes + result.kept_bytes


# -- checkpoint advice -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def deep():
    torch.manual_seed(0)
    model, x = DeepMLP(), torch.randn(64, 32)
    result = gradcli.memory(model, x, loss=square, checkpoint=2, create_graph=False, repeats=1)
    return model, x, result


def test_checkpoint_advice_lowers_saved_bytes_by_what_it_predicts(deep):
    model, x, result = deep
    modules = [trial for trial in result.checkpoint if trial.segments is None]  # the stack's segments: test_memory_segments.py
    assert len(modules) == 2
    own = {t.untyped_storage().data_ptr() for t in (*model.parameters(), x)}
    for trial in modules:
        assert trial.predicted_freed > 0
        drop = trial.saved_bytes_before - trial.saved_bytes_after
        assert abs(drop - trial.predicted_freed) <= 0.05 * trial.predicted_freed
        # The same measure, by the test's own counter and torch's own checkpoint.
        counter = HandCounter()
        with counter.hooks():
            plain = square(model(x))
        before = counter.total(leave_out=own)
        module = model.get_submodule(trial.module)
        original = module.forward
        module.forward = lambda *a, f=original: torch.utils.checkpoint.checkpoint(f, *a, use_reentrant=False)
        try:
            counter = HandCounter()
            with counter.hooks():
                tried = square(model(x))
            after = counter.total(leave_out=own)
            assert (before, after) == (trial.saved_bytes_before, trial.saved_bytes_after)
            params = list(model.parameters())
            assert all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(plain, params), torch.autograd.grad(tried, params)))
        finally:
            del module.forward
        assert trial.gradients_equal and trial.max_abs_diff == 0.0


def test_the_stack_of_blocks_is_advised_in_segments_with_torchs_bytes_and_gradients(deep):
    """The ModuleList of six Blocks is one stack: torch's checkpoint_sequential in the advised
    number of segments saves what the trial says, and gives the same gradients."""
    from torch.utils.checkpoint import checkpoint_sequential

    model, x, result = deep
    (stack,) = [trial for trial in result.checkpoint if trial.segments is not None]
    assert (stack.module, stack.module_class) == ("blocks", "ModuleList")
    own = {t.untyped_storage().data_ptr() for t in (*model.parameters(), x)}
    params = list(model.parameters())
    counter = HandCounter()
    with counter.hooks():
        plain = square(model(x))
    before = counter.total(leave_out=own)
    counter = HandCounter()
    with counter.hooks():
        tried = square(model.head(checkpoint_sequential(list(model.blocks), stack.segments, x, use_reentrant=False)))
    after = counter.total(leave_out=own)
    assert (stack.saved_bytes_before, stack.saved_bytes_after, stack.predicted_freed) == (before, after, before - after)
    equal = all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(plain, params), torch.autograd.grad(tried, params)))
    assert equal and stack.gradients_equal is True and stack.agrees is True and stack.max_abs_diff == 0.0
    # torch's checkpoint_sequential saves less (above), and the measured peak falls with it
    assert before > after and stack.peak_after is not None and stack.peak_after < stack.peak_before
    # A ModuleList is never called itself: its time is its blocks' (it was reported as 0).
    assert isinstance(stack.forward_seconds, float) and stack.forward_seconds > 0


def test_checkpoint_advice_in_the_document(deep):
    document = deep[2].as_dict()
    assert set(document["checkpoint"][0]) >= {"module", "saved_bytes_before", "saved_bytes_after", "time_ratio", "gradients_equal"}
    assert document["ok"] is True and document["saved_bytes"] == deep[2].saved_bytes
    assert set(document["nodes"][0]) >= {"node", "module", "line", "bytes"}


# -- mixed precision ---------------------------------------------------------------------------------
def test_amp_bfloat16_saves_bfloat16_copies_of_the_weights():
    _, _, result = run("mlp", amp="bfloat16")
    # Under autocast each addmm saves a bfloat16 copy of its weight (the 2nd and 3rd Linear's:
    # their inputs require grad), not the float32 parameter; the activations are bfloat16 too.
    assert result.by_kind["cast"] == (16 * 16 + 16 * 4) * 2
    assert "parameter" not in result.by_kind
    casts = sorted(t.name for _, t in result.saved() if t.kind == "cast")
    assert casts == ["net.2.weight", "net.4.weight"]
    assert {t.dtype for _, t in result.saved() if t.kind == "activation"} <= {"bfloat16", "float32"}
    assert result.by_dtype()["bfloat16"] > 0


# -- the API's conveniences and bad input -----------------------------------------------------------
def test_str_and_json_of_the_api_result():
    _, _, result = run("mlp")
    assert "Saved for backward: 2.11 KiB" in str(result)
    assert '"saved_bytes": 2160' in result.to_json()


def test_bad_options_are_usage_errors():
    model = MLP()
    with pytest.raises(gradcli.GradcliError, match="autocast computes in bfloat16 or float16"):
        on_python_model(memory_of, model, (torch.randn(2, 8),), {"amp": "float64"}, square, RUN_OPTIONS)
    with pytest.raises(gradcli.GradcliError, match="floating-point scalar"):
        on_python_model(memory_of, model, (torch.randn(2, 8),), {}, None, RUN_OPTIONS)


# -- what must not change the model's own behaviour ------------------------------------------------
class SigmoidScaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        p = torch.sigmoid(self.fc(x))
        p.mul_(2)  # sigmoid saved its output: backward must raise, hooks or not
        return p.sum()


def test_an_inplace_change_of_a_saved_tensor_still_raises():
    model, x = SigmoidScaled(), torch.randn(2, 3)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        model(x).backward()  # torch's own answer
    result = gradcli.memory(model, x)
    assert not result.ok and result.problems[0].kind == "backward-raised"
    assert "modified by an inplace operation" in result.error


class SelfCheckpointed(nn.Module):
    """A model that checkpoints its first block itself."""

    def __init__(self):
        super().__init__()
        self.first, self.second = Block(), Block()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.second(torch.utils.checkpoint.checkpoint(self.first, x, use_reentrant=False))


def test_a_model_that_checkpoints_itself_is_not_recomputed_by_the_count():
    torch.manual_seed(0)
    model, x = SelfCheckpointed(), torch.randn(4, 32)
    counts = []
    handle = model.first.register_forward_pre_hook(lambda *args: counts.append(1))
    result = gradcli.memory(model, x, loss=square, checkpoint=0, create_graph=False)
    handle.remove()
    assert len(counts) == 2  # forward, and the recomputation in backward: nothing more
    counter = HandCounter()
    with counter.hooks():
        loss = square(model(x))
    # What the checkpoint keeps (its input) is saved outside the graph's walk: reported apart.
    assert result.saved_bytes + result.unreached_bytes == counter.total()
    assert not any(n.module and n.module.startswith("first") for n in result.nodes)
    del loss


# -- the advice's ranking and its proof (issue 38: mutants that survived) ------------------------
class WideAndNarrow(nn.Module):
    """Two branches that both free saved bytes when checkpointed, and an Identity that saves
    nothing (no node runs inside it)."""

    def __init__(self):
        super().__init__()
        self.wide = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 8))
        self.narrow = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8))
        self.keep = nn.Identity()

    def forward(self, x):
        return self.narrow(self.keep(self.wide(x)))


def _torch_drop(model, x, path):
    """The saved bytes torch's own checkpoint of `path` frees, by the hand counter."""
    own = {t.untyped_storage().data_ptr() for t in (*model.parameters(), x)}
    counter = HandCounter()
    with counter.hooks():
        plain = square(model(x))
    before = counter.total(leave_out=own)
    module = model.get_submodule(path)
    module.forward = lambda *a, f=module.forward: torch.utils.checkpoint.checkpoint(f, *a, use_reentrant=False)
    try:
        counter = HandCounter()
        with counter.hooks():
            tried = square(model(x))
        return before - counter.total(leave_out=own)
    finally:
        del module.forward, plain, tried


def test_the_advice_ranks_by_bytes_freed_per_second_of_recompute(monkeypatch):
    """The forward times are the machine's: fixed here so that the ranking is the test's. The
    wide branch frees more bytes but takes 1000 times longer: per second the narrow one wins,
    and the Identity (no node inside, nothing freed by torch's checkpoint) is never advised."""
    from gradcli.footprint import checkpoint as advice

    torch.manual_seed(0)
    model, x = WideAndNarrow(), torch.randn(16, 8)
    seconds = {"": 10.0, "wide": 1.0, "narrow": 0.001, "keep": 0.0001}
    monkeypatch.setattr(advice, "forward_seconds", lambda run: (dict(seconds), seconds[""]))
    drops = {path: _torch_drop(model, x, path) for path in ("wide", "narrow", "keep")}
    assert drops["keep"] == 0 and drops["wide"] > drops["narrow"] > 0
    per_second = sorted((p for p in drops if drops[p] > 0), key=lambda p: -drops[p] / seconds[p])
    assert per_second != sorted((p for p in drops if drops[p] > 0), key=lambda p: -drops[p] * seconds[p])

    result = gradcli.memory(model, x, loss=square, checkpoint=3, create_graph=False, repeats=1)
    assert [trial.module for trial in result.checkpoint] == per_second
    for trial in result.checkpoint:
        assert trial.saved_bytes_before - trial.saved_bytes_after == drops[trial.module] == trial.predicted_freed
    first = gradcli.memory(model, x, loss=square, checkpoint=1, create_graph=False, repeats=1)
    assert [trial.module for trial in first.checkpoint] == per_second[:1]


def _gradients(model, x, dtype=torch.float32):
    twin = model.to(dtype)
    return list(torch.autograd.grad(square(twin(x.to(dtype))), list(twin.parameters())))


def test_the_proof_tells_equal_close_and_different_gradients_apart():
    """`_same_gradients` (bit for bit, the largest difference, compare's tolerance), on a
    model's float32 gradients against: themselves, the float64 gradients rounded to float32
    (a few units of rounding apart), the gradients at another input, and a missing one."""
    from gradcli.footprint.checkpoint import _same_gradients

    torch.manual_seed(0)
    model, x = MLP(), torch.randn(5, 8)
    named = list(model.named_parameters())
    plain = _gradients(model, x)
    assert _same_gradients(named, plain, [g.clone() for g in plain], None) == (True, 0.0, True)

    rounded = [g.float() for g in _gradients(model.double(), x, torch.float64)]
    model.float()
    diff = max(float((a.double() - b.double()).abs().max()) for a, b in zip(plain, rounded))
    relative = max(float((a - b).norm() / a.norm()) for a, b in zip(plain, rounded))
    assert 0 < diff and relative < 4 * torch.finfo(torch.float32).eps  # torch's own: rounding apart
    assert _same_gradients(named, plain, rounded, None) == (False, diff, True)

    other = _gradients(model, 3 * x)
    far = max(float((a.double() - b.double()).abs().max()) for a, b in zip(plain, other))
    assert _same_gradients(named, plain, other, None) == (False, far, False)
    # A difference far beyond float32's rounding, far inside bfloat16's (eps 2**-7): under
    # bfloat16 autocast it agrees.
    nudged = [g * (1 + 1e-4) for g in plain]
    assert all(float((a - b).norm() / a.norm()) < torch.finfo(torch.bfloat16).eps / 10 for a, b in zip(plain, nudged))
    assert _same_gradients(named, plain, nudged, "bfloat16")[1:] == (max(float((a.double() - b.double()).abs().max())
                                                                        for a, b in zip(plain, nudged)), True)
    assert _same_gradients(named, plain, nudged, None)[2] is False

    mixed = [plain[0], *other[1:]]  # the first parameter's gradient equal, the others not
    assert _same_gradients(named, plain, mixed, None) == (False, max(float((a.double() - b.double()).abs().max())
                                                                      for a, b in zip(plain[1:], other[1:])), False)

    missing = [None, *plain[1:]]
    assert _same_gradients(named, plain, missing, None) == (False, 0.0, False)
    assert _same_gradients(named, missing, missing, None) == (True, 0.0, True)
    # a parameter without a gradient on both sides (unused), then the others compared all the same
    assert _same_gradients(named, missing, [None, *other[1:]], None) == (False, max(
        float((a.double() - b.double()).abs().max()) for a, b in zip(plain[1:], other[1:])), False)


class Float8Weight(nn.Module):
    """A float8 parameter used through `.float()`: torch gives it a float8 gradient."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 4).to(torch.float8_e4m3fn))

    def forward(self, x):
        return x @ self.w.float()


def test_float8_gradients_are_told_apart_at_float32_s_tolerance():
    """float8 is none of compare's tolerances: its gradients are judged at float32's (gradcli's
    fallback), their difference measured in float64. torch's gradients at two inputs."""
    from gradcli.footprint.checkpoint import _same_gradients

    torch.manual_seed(0)
    model, x = Float8Weight(), torch.randn(5, 8)
    named = list(model.named_parameters())
    (plain,) = torch.autograd.grad(square(model(x)), [model.w])
    (other,) = torch.autograd.grad(square(model(2 * x)), [model.w])
    assert plain.dtype == torch.float8_e4m3fn and not torch.equal(plain, other)
    assert _same_gradients(named, [plain], [plain.clone()], None) == (True, 0.0, True)
    far = float((plain.double() - other.double()).abs().max())
    assert float((plain.float() - other.float()).norm() / plain.float().norm()) > 0.1  # torch: far apart
    assert _same_gradients(named, [plain], [other], None) == (False, far, False)


class Fickle(nn.Module):
    """Runs one tanh fewer on every call: a checkpoint's recomputation saves fewer tensors
    than its forward did, which torch's checkpoint refuses in backward."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 64)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        h = torch.tanh(self.fc(x))
        for _ in range(max(1, 16 - self.calls)):
            h = torch.tanh(h)
        return h


class FickleNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fickle = Fickle()
        self.head = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))

    def forward(self, x):
        return self.head(self.fickle(x))


def test_a_module_whose_recomputation_differs_is_not_advised_with_torchs_reason():
    torch.manual_seed(0)
    model, x = FickleNet(), torch.randn(4, 8)
    twin = Fickle()
    with pytest.raises(RuntimeError) as raised:  # torch's own checkpoint, by hand
        torch.utils.checkpoint.checkpoint(twin, x, use_reentrant=False).pow(2).mean().backward()
    reason = str(raised.value).strip().splitlines()[0]
    assert reason.startswith("torch.utils.checkpoint: A different number of tensors was saved")
    result = gradcli.memory(model, x, loss=square, checkpoint=1, create_graph=False, repeats=1)
    assert f"checkpointing fickle alone raised in backward ({reason}): not advised" in result.notes
    assert "fickle" not in [trial.module for trial in result.checkpoint]


def test_an_inplace_change_is_told_with_torchs_dtype_shape_and_versions():
    import re

    torch.manual_seed(0)
    model, x = SigmoidScaled(), torch.randn(2, 3)
    with pytest.raises(RuntimeError) as raised:
        model(x).backward()
    found = re.search(r"\[torch\.(\w+)Tensor \[(\d+), (\d+)\]\].* is at version (\d+); expected version (\d+)",
                      str(raised.value))
    kind, rows, cols, version, expected = found.groups()
    dtype = {"Float": "float32", "Double": "float64"}[kind]
    result = gradcli.memory(model, x)
    assert (f"a {dtype} tensor of shape {rows}x{cols} is at version {version}; expected version {expected} instead"
            in result.error)


class Scaling(nn.Module):
    def forward(self, x, shift):
        return torch.tanh(x) + shift


class CalledWithANumber(nn.Module):
    """A submodule called with a Python number next to its tensor."""

    def __init__(self):
        super().__init__()
        self.fc, self.scaling, self.head = nn.Linear(8, 16), Scaling(), nn.Linear(16, 2)

    def forward(self, x):
        return self.head(self.scaling(self.fc(x), 0.5))  # 0.5 is an argument, not a tensor


class WithCube(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return Cube.apply(self.fc(x))


def cubed(out):
    return Cube.apply(out).mean()


def two_saves(out):
    """A loss whose multiply saves both of its operands (MulBackward0: self and other)."""
    return (out * torch.tanh(out)).mean()


@pytest.mark.parametrize(("model", "loss", "checkpoint"), [
    (CalledWithANumber, square, 1), (WithCube, square, 0), (MLP, two_saves, 0), (MLP, cubed, 0),
], ids=["a number among a module's arguments", "a custom Function's saves", "a loss saving two operands",
        "a custom Function in the loss"])
def test_saved_bytes_of_more_kinds_of_saves_are_torchs(model, loss, checkpoint):
    torch.manual_seed(0)
    model, x = model(), torch.randn(5, 8)
    result = gradcli.memory(model, x, loss=loss, checkpoint=checkpoint, create_graph=False, repeats=1)
    counter = HandCounter()
    with counter.hooks():
        value = loss(model(x))
    assert result.saved_bytes == counter.total() > 0
    plain = loss(model(x))  # the nodes' own saved tensors, without hooks
    assert sorted((n.node, n.bytes) for n in result.nodes) == torch_nodes(plain.grad_fn)
    del value


class Drifting(nn.Module):
    """Computes a little differently when run again inside backward (a checkpoint's
    recomputation, where torch has a graph task): the same tensors saved, other values."""

    def __init__(self, drift):
        super().__init__()
        self.fc, self.drift = nn.Linear(8, 8), drift

    def forward(self, x):
        again = torch._C._current_graph_task_id() != -1
        return torch.tanh(torch.tanh(self.fc(x) * (1.0 + self.drift if again else 1.0)))


@pytest.mark.parametrize(("drift", "amp"), [(0.5, None), (3e-3, "bfloat16")])
def test_a_recomputation_that_drifts_is_told_against_torch_s_own_checkpoint(monkeypatch, drift, amp):
    """Every trial (the stack's segments and each module) against torch's own checkpoint of
    the same thing: not equal, the largest difference torch's, and compare's tolerance at the
    dtype the gradients were computed in: a drift of a half is far past float32's rounding; one
    of 0.3% under bfloat16 autocast is within bfloat16's (and past float32's)."""
    from torch.utils.checkpoint import checkpoint, checkpoint_sequential

    from gradcli.footprint import checkpoint as advice

    # the timed runs repeat until 0.3 s of CPU: timings only, never the proof's input
    monkeypatch.setattr(advice, "timed_pair", lambda run, params, applied, repeats: (1.0, 1.0))

    torch.manual_seed(0)
    model, x = nn.Sequential(*(Drifting(drift) for _ in range(4))), torch.randn(16, 8)
    params = list(model.parameters())
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if amp else contextlib.nullcontext()

    def gradients(forward):
        with autocast:
            loss = square(forward(x))
        return torch.autograd.grad(loss, params)

    result = gradcli.memory(model, x, loss=square, checkpoint=2, create_graph=False, repeats=1, amp=amp)
    assert {trial.segments is None for trial in result.checkpoint} == {True, False}  # modules and the stack
    plain = gradients(model)
    for trial in result.checkpoint:
        if trial.segments is not None:
            tried = gradients(lambda x: checkpoint_sequential(model, trial.segments, x, use_reentrant=False))
        else:
            module = model.get_submodule(trial.module)
            module.forward = lambda *a, f=module.forward: checkpoint(f, *a, use_reentrant=False)
            try:
                tried = gradients(model)
            finally:
                del module.forward
        largest = max(float((a.double() - b.double()).abs().max()) for a, b in zip(plain, tried))
        relative = max(float((a - b).norm() / a.norm()) for a, b in zip(plain, tried))
        assert (trial.gradients_equal, trial.max_abs_diff) == (False, largest) and largest > 0
        if amp:
            assert 4 * torch.finfo(torch.float32).eps < relative < torch.finfo(torch.bfloat16).eps
            assert trial.agrees is True
        else:
            assert relative > 1e3 * torch.finfo(torch.float32).eps
            assert trial.agrees is False


class WithASpare(nn.Module):
    """A trainable parameter forward never uses: torch gives it no gradient."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 8), nn.Tanh())
        self.spare = nn.Linear(8, 8)

    def forward(self, x):
        return self.body(x)


def test_a_parameter_forward_never_uses_leaves_the_proof_standing(monkeypatch):
    from gradcli.footprint import checkpoint as advice

    monkeypatch.setattr(advice, "timed_pair", lambda run, params, applied, repeats: (1.0, 1.0))  # timings only
    torch.manual_seed(0)
    model, x = WithASpare(), torch.randn(16, 8)
    params = list(model.parameters())
    with pytest.raises(RuntimeError, match="not have been used"):  # torch's own answer without allow_unused
        torch.autograd.grad(square(model(x)), params)
    grads = torch.autograd.grad(square(model(x)), params, allow_unused=True)
    assert [g is None for g in grads] == [False] * 4 + [True] * 2
    result = gradcli.memory(model, x, loss=square, checkpoint=1, create_graph=False, repeats=1)
    assert result.ok and result.checkpoint
    for trial in result.checkpoint:
        assert (trial.gradients_equal, trial.max_abs_diff, trial.agrees) == (True, 0.0, True)


def test_float64_gradients_are_held_to_float64_s_rounding_not_float32_s():
    """A float64 model's gradients against themselves rounded through float32: far past
    float64's rounding (torch's finfo), within float32's, so they do not agree."""
    from gradcli.footprint.checkpoint import _same_gradients

    torch.manual_seed(0)
    model = MLP().double()
    x = torch.randn(5, 8, dtype=torch.float64)
    named = list(model.named_parameters())
    plain = _gradients(model, x, torch.float64)
    rounded = [g.float().double() for g in plain]
    relative = max(float((a - b).norm() / a.norm()) for a, b in zip(plain, rounded))
    assert 1e3 * torch.finfo(torch.float64).eps < relative < 4 * torch.finfo(torch.float32).eps
    diff = max(float((a - b).abs().max()) for a, b in zip(plain, rounded))
    assert _same_gradients(named, plain, rounded, None) == (False, diff, False)


def test_the_checkpoint_trials_recompute_a_model_s_own_checkpoint_once_per_backward(monkeypatch):
    """torch's checkpoint runs its region again once in each backward, and only then: the
    trials' runs (forward + backward each, or forward alone under no_grad) leave the first
    block called once per forward plus once per forward that had a graph, no more (reading a
    checkpointed node's saves back would recompute it again)."""
    from gradcli.footprint import checkpoint as advice

    monkeypatch.setattr(advice, "timed_pair", lambda run, params, applied, repeats: (1.0, 1.0))  # timings only
    torch.manual_seed(0)
    model, x = SelfCheckpointed(), torch.randn(4, 32)
    forwards, first = [], []
    model.register_forward_pre_hook(lambda *args: forwards.append(torch.is_grad_enabled()))
    model.first.register_forward_pre_hook(lambda *args: first.append(1))
    result = gradcli.memory(model, x, loss=square, checkpoint=1, create_graph=False, repeats=1)
    assert result.ok and result.checkpoint
    assert len(first) == len(forwards) + sum(forwards)


def test_after_a_module_that_raises_the_next_is_still_tried(monkeypatch):
    """fickle ranks first (the forward times fixed by the test) and raises in backward; head,
    next, is still tried (torch's own checkpoint of it frees bytes)."""
    from gradcli.footprint import checkpoint as advice

    torch.manual_seed(0)
    model, x = FickleNet(), torch.randn(4, 8)
    seconds = {path: 1.0 for path, _ in model.named_modules()}
    seconds.update({"": 10.0, "fickle": 1e-6, "head": 1e-3})
    monkeypatch.setattr(advice, "forward_seconds", lambda run: (dict(seconds), seconds[""]))
    monkeypatch.setattr(advice, "timed_pair", lambda run, params, applied, repeats: (1.0, 1.0))  # timings only
    result = gradcli.memory(model, x, loss=square, checkpoint=2, create_graph=False, repeats=1)
    assert any(note.startswith("checkpointing fickle alone raised in backward") for note in result.notes)
    assert _torch_drop(model, x, "head") > 0  # (fickle saves fewer tensors at every call: no exact bytes)
    assert [trial.module for trial in result.checkpoint if trial.segments is None] == ["head"]


class ExpScaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        e = torch.exp(self.fc(x).sum())  # exp saves its 0-d result
        e.mul_(2)
        return e


def test_an_inplace_change_of_a_0_d_saved_tensor_is_told_with_its_empty_shape():
    import re

    torch.manual_seed(0)
    model, x = ExpScaled(), torch.randn(2, 3)
    with pytest.raises(RuntimeError) as raised:
        model(x).backward()
    found = re.search(r"\[torch\.FloatTensor \[\]\].* is at version (\d+); expected version (\d+)", str(raised.value))
    version, expected = found.groups()  # torch's: a tensor of no dimensions
    result = gradcli.memory(model, x, loss=lambda out: out)
    assert f"a float32 tensor of shape () is at version {version}; expected version {expected} instead" in result.error


class SparseInput(nn.Module):
    """torch.sparse.mm saves its sparse input: a tensor without a single storage."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(100, 4))

    def forward(self, x):
        return torch.tanh(torch.sparse.mm(x, self.w))


def _sparse_rows() -> torch.Tensor:
    """3 x 100, three values: 60 bytes held in its indices and values, 1,200 dense."""
    return torch.sparse_coo_tensor(torch.tensor([[0, 1, 2], [3, 50, 99]]), torch.tensor([1.0, 2.0, 3.0]), (3, 100),
                                   check_invariants=True).coalesce()


def _saved_by_torch(model: nn.Module, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor, int]:
    """What torch saves for backward in `square(model(x))`, in its order (saved_tensors_hooks),
    the loss, and the bytes of the dense ones' distinct storages."""
    saved = []

    def pack(tensor):
        saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = square(model(x))
    dense = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in saved if t.layout == torch.strided}
    return saved, loss, sum(dense.values())


def _held(sparse: torch.Tensor) -> int:
    return sparse._indices().untyped_storage().nbytes() + sparse._values().untyped_storage().nbytes()


class PhaseDrift(nn.Module):
    """A complex weight whose recomputation inside backward (a checkpoint's) turns its product
    by a small phase: the same tensors saved, a gradient that differs in both parts."""

    def __init__(self, dtype, drift):
        super().__init__()
        self.w, self.drift = nn.Parameter(torch.randn(8, 8, dtype=dtype)), drift

    def forward(self, x):
        again = torch._C._current_graph_task_id() != -1
        z = (x.to(self.w.dtype) @ self.w) * (complex(1.0, self.drift) if again else 1.0)
        return torch.tanh(z.real) * torch.tanh(z.imag)


@pytest.mark.parametrize(("dtype", "drift"), [(torch.complex64, 0.5), (torch.complex128, 1e-9)])
def test_a_complex_gradient_that_drifts_is_measured_by_modulus_at_its_parts_precision(monkeypatch, dtype, drift):
    """torch's own checkpoint of the drifting module against the plain run: the largest
    difference is torch's modulus of the complex difference, and the proof holds it to the
    parts' precision: complex128's drift of 1e-9 is within float32's rounding, not float64's."""
    from torch.utils.checkpoint import checkpoint

    from gradcli.footprint import checkpoint as advice

    monkeypatch.setattr(advice, "timed_pair", lambda run, params, applied, repeats: (1.0, 1.0))  # timings only
    real = dtype.to_real()
    torch.manual_seed(0)
    model, x = nn.Sequential(PhaseDrift(dtype, drift), nn.Linear(8, 4).to(real)), torch.randn(16, 8, dtype=real)
    params = list(model.parameters())
    plain = torch.autograd.grad(square(model(x)), params)
    tried = torch.autograd.grad(square(model[1](checkpoint(model[0], x, use_reentrant=False))), params)
    wide = {dtype: torch.complex128, real: torch.float64}  # the difference of the values, unrounded
    largest = max(float((a.to(wide[a.dtype]) - b.to(wide[a.dtype])).abs().max()) for a, b in zip(plain, tried))
    relative = float(torch.linalg.vector_norm(plain[0] - tried[0]) / torch.linalg.vector_norm(plain[0]))
    assert relative > 1e3 * torch.finfo(real).eps
    if dtype == torch.complex128:
        assert relative < torch.finfo(torch.float32).eps

    result = gradcli.memory(model, x, loss=square, checkpoint=1, create_graph=False, repeats=1)
    (trial,) = [t for t in result.checkpoint if t.module == "0"]
    assert (trial.gradients_equal, trial.max_abs_diff, trial.agrees) == (False, largest, False)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_a_complex_gradient_differing_in_its_imaginary_part_alone_differs(dtype):
    """The real parts equal to the bit, the imaginary parts a thousandth apart (torch's
    arithmetic): a difference of the modulus torch gives, beyond any tolerance of the parts."""
    from gradcli.footprint.checkpoint import _same_gradients

    torch.manual_seed(0)
    w = nn.Parameter(torch.randn(4, 4, dtype=dtype))
    (grad,) = torch.autograd.grad((torch.randn(3, 4, dtype=dtype) @ w).abs().sum(), [w])
    other = torch.complex(grad.real, grad.imag * (1 + 1e-3))
    assert torch.equal(grad.real, other.real) and not torch.equal(grad, other)
    modulus = float((grad.to(torch.complex128) - other.to(torch.complex128)).abs().max())
    assert _same_gradients([("w", w)], [grad], [other], None) == (False, modulus, False)


def test_a_loss_in_the_language_whose_node_saves_a_tuple_of_tensors_is_counted_by_torch_s_saves():
    """A --loss is built where memory's hooks do not reach, so its nodes' saves are read back:
    IndexBackward0 keeps its indices as a tuple of tensors (torch's `_saved_indices`). Every
    node's bytes against torch's own `_saved_*` attributes of the same loss written in Python."""
    torch.manual_seed(0)
    model, x = MLP(), torch.randn(5, 8)
    plain = model(x)[[0, 2]].pow(2).sum()
    index = plain.grad_fn.next_functions[0][0].next_functions[0][0]  # Sum <- Pow <- Index
    assert index.name() == "IndexBackward0" and isinstance(index._saved_indices, tuple)  # torch's own
    result = gradcli.memory(model, x, loss="out[[0, 2]].pow(2).sum()", checkpoint=0, create_graph=False)
    assert sorted((n.node, n.bytes) for n in result.nodes) == torch_nodes(plain.grad_fn)
    (node,) = [n for n in result.nodes if n.node == "IndexBackward0"]
    assert node.bytes == index._saved_indices[0].untyped_storage().nbytes() > 0


class NormedUnderAutocast(nn.Module):
    """Under bfloat16 autocast a LayerNorm the model runs in float32 (`.float()`, for its
    statistics): LayerNorm saves the float32 copy of fc1's bfloat16 output, fc2 a bfloat16 copy
    of LayerNorm's float32 output. Both are copies of activations (ToCopyBackward0 of a node
    that is no parameter's AccumulateGrad), not of weights."""

    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.norm(self.fc1(x).float()))


def test_under_autocast_copies_of_activations_are_activations_and_only_weights_copies_are_casts():
    torch.manual_seed(0)
    model, x = NormedUnderAutocast(), torch.randn(5, 8)
    counter, copies = HandCounter(), []

    def pack(tensor):  # torch's own: what is saved, and which saves are dtype copies (or their views) of what
        fn = tensor._base.grad_fn if tensor._base is not None else tensor.grad_fn
        if fn is not None and fn.name() == "ToCopyBackward0":
            source = fn.next_functions[0][0]
            copies.append((tensor.dtype, getattr(source, "variable", None) is not None))
        return counter.pack(tensor)

    with torch.autocast("cpu", dtype=torch.bfloat16), torch.autograd.graph.saved_tensors_hooks(pack, counter.unpack):
        value = square(model(x))
    # fc1's input needs no gradient: addmm saves no copy of fc1's weight (torch's rule)
    assert sorted(copies, key=str) == [(torch.bfloat16, False), (torch.bfloat16, True), (torch.float32, False)]
    result = gradcli.memory(model, x, loss=square, checkpoint=0, create_graph=False, amp="bfloat16")
    assert result.saved_bytes == counter.total() > 0
    assert sorted(t.name for _, t in result.saved() if t.kind == "cast") == ["fc2.weight"]
    assert result.by_kind["cast"] == model.fc2.weight.numel() * torch.finfo(torch.bfloat16).bits // 8
    del value


class SparseAfterTanh(nn.Module):
    """The sparse input is saved after two dense results (tanh saves its output): the third save."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(100, 4))

    def forward(self, x):
        return torch.sparse.mm(x, torch.tanh(torch.tanh(self.w)))


@pytest.mark.parametrize(("model_class", "place"), [(SparseInput, 0), (SparseAfterTanh, 2)])
def test_a_saved_sparse_tensor_is_counted_by_its_indices_and_values_not_its_dense_size(model_class, place):
    torch.manual_seed(0)
    model, x = model_class(), _sparse_rows()
    saved, loss, dense = _saved_by_torch(model, x)
    assert [t.layout for t in saved].index(torch.sparse_coo) == place  # torch's order: first, or after two others
    held = _held(saved[place])
    assert held < saved[place].numel() * saved[place].element_size()  # 60 bytes, not the 1,200 of its dense size
    result = gradcli.memory(model, x, loss=square, checkpoint=0, create_graph=False)
    assert result.saved_bytes == held + dense
    (node,) = [n for n in result.nodes if n.node == "SparseAddmmBackward0"]
    assert node.bytes == held
    del loss


class RaisingAfterTanh(nn.Module):
    """tanh saves its output; exp saves its result, which forward then changes in place, so
    backward raises. Every output of tanh is watched by a weak reference."""

    def __init__(self):
        super().__init__()
        self.fc, self.outputs = nn.Linear(3, 2), []

    def forward(self, x):
        h = torch.tanh(self.fc(x))
        self.outputs.append(weakref.ref(h))
        e = torch.exp(h.sum())
        e.mul_(2)
        return e


def test_a_backward_that_raises_leaves_no_saved_output_alive():
    """torch frees a saved output as soon as the graph goes, backward having raised or not
    (no garbage collection needed: the collector is off here); so does memory's run, whose
    boxes must not hold the node that holds them."""
    import gc

    torch.manual_seed(0)
    model, x = RaisingAfterTanh(), torch.randn(2, 3)
    collecting = gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            model(x).backward()
        assert [ref() for ref in model.outputs] == [None]  # torch's own
        result = gradcli.memory(model, x, loss=lambda out: out, checkpoint=0, create_graph=False)
        assert "modified by an inplace operation" in result.error
        assert len(model.outputs) > 1 and [ref() for ref in model.outputs] == [None] * len(model.outputs)
    finally:
        if collecting:
            gc.enable()


@pytest.mark.parametrize("made_under_a_profiler", [False, True])
def test_garbage_collected_during_the_run_does_not_lower_the_peak(made_under_a_profiler):
    """A reference cycle holding 8 MB, left before the run (made with no profiler on, or inside
    an earlier PeakMeter window, as memory's trials run back to back), is freed by the
    collector inside the run (threshold 1): its free must not count against the run's own
    allocations. The truth is torch's allocator events for the same run with no garbage around."""
    import gc

    from gradcli.footprint.peak import PeakMeter
    from memory_truth import allocator_peak

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
    x = torch.randn(64, 256)
    params = list(model.parameters())

    def run():
        return model(x).pow(2).mean()

    gc.collect()
    truth = allocator_peak(run, params)

    collecting = gc.isenabled()
    gc.disable()  # the cycle survives its own window
    try:
        with PeakMeter(torch.device("cpu")) if made_under_a_profiler else contextlib.nullcontext():
            cycle: list = [torch.zeros(2_000_000)]
            cycle.append(cycle)
            freed = weakref.ref(cycle[0])
            del cycle  # garbage now: only the cyclic collector frees it
    finally:
        if collecting:
            gc.enable()
    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        with PeakMeter(torch.device("cpu")) as meter:
            torch.autograd.grad(run(), params)
            assert freed() is None, "the premise: the collector ran during the run"
    finally:
        gc.set_threshold(*threshold)
    assert meter.peak == truth
