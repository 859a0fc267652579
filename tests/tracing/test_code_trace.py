"""trace on the user's own code: real torch.nn models from tests/fixtures/models and examples/.

Every node's module and line is compared with a hand-built expectation (the MLP), `--json`
with a direct grad_fn walk, parameters' gradients with a hand-written backward (the MLP) or
with torch's own backward on the same model (the larger ones)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import gradcli
from gradcli.graph.walk import ACCUMULATE_GRAD
from paths import ROOT

MODELS = ROOT / "tests" / "fixtures" / "models"
MLP = f"{MODELS / 'mlp.py'}:MLP"
NETS = MODELS / "nets.py"
BROKEN = MODELS / "broken.py"
EXAMPLE = ROOT / "examples" / "residual_mlp.py"


def line_of(path: Path, text: str) -> int:
    """The 1-based number of the line of `path` that contains `text` (exactly one)."""
    found = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


def direct_walk(root) -> list[tuple[str, list[int | None]]]:
    """Depth-first pre-order over grad_fn, children in next_functions order: (name, child indexes)."""
    order, index = [], {}

    def visit(fn):
        index[fn] = len(order)
        order.append(fn)
        for child, _ in fn.next_functions:
            if child is not None and child not in index:
                visit(child)

    visit(root)
    return [(fn.name(), [None if c is None else index[c] for c, _ in fn.next_functions]) for fn in order]


def json_walk(document) -> list[tuple[str, list[int | None]]]:
    position = {node["id"]: i for i, node in enumerate(document["nodes"])}
    return [(node["name"], [None if c is None else position[c] for c in node["next"]]) for node in document["nodes"]]


# -- the MLP: every node by hand ---------------------------------------------------------------
def test_every_mlp_node_has_the_module_and_line_that_created_it():
    result = gradcli.trace(MLP, ["x=randn(2,3)"], loss="out.sum()", seed=0)
    first = line_of(MODELS / "mlp.py", "h = self.act(self.fc1(x))")
    second = line_of(MODELS / "mlp.py", "return self.fc2(h)")
    got = [
        (n.name if n.name != ACCUMULATE_GRAD else f"AccumulateGrad {n.variable}",
         n.origin.module, n.origin.module_class, n.origin.line)
        for n in result.graph.nodes
    ]
    assert got == [
        ("SumBackward0", None, None, 1),  # --loss line 1
        ("AddmmBackward0", "fc2", "Linear", second),
        ("AccumulateGrad fc2.bias", "fc2", "Linear", None),
        ("TanhBackward0", "act", "Tanh", first),
        ("AddmmBackward0", "fc1", "Linear", first),
        ("AccumulateGrad fc1.bias", "fc1", "Linear", None),
        ("TBackward0", "fc1", "Linear", first),
        ("AccumulateGrad fc1.weight", "fc1", "Linear", None),
        ("TBackward0", "fc2", "Linear", second),
        ("AccumulateGrad fc2.weight", "fc2", "Linear", None),
    ]
    assert result.graph.nodes[0].origin.file == "--loss" and result.graph.nodes[0].origin.code == "out.sum()"
    assert result.graph.nodes[1].origin.code == "return self.fc2(h)"
    assert result.target == {"kind": "module", "name": MLP, "found": "nn.Module subclass MLP, constructed as MLP()"}


def test_mlp_parameter_gradients_equal_a_hand_written_backward():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mlp_for_hand", MODELS / "mlp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(1)
    model = module.MLP().double()
    x = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=torch.float64)
    labels_free_loss = "(out**2).sum()"
    result = gradcli.trace(model, x, loss=labels_free_loss)
    with torch.no_grad():  # by hand: out = tanh(x W1' + b1) W2' + b2, L = sum(out^2)
        w1, b1, w2, b2 = model.fc1.weight, model.fc1.bias, model.fc2.weight, model.fc2.bias
        h = torch.tanh(x @ w1.T + b1)
        out = h @ w2.T + b2
        d_out = 2 * out
        d_w2, d_b2 = d_out.T @ h, d_out.sum(0)
        d_pre = (d_out @ w2) * (1 - h**2)
        d_w1, d_b1 = d_pre.T @ x, d_pre.sum(0)
    grads = {leaf.name: torch.tensor(leaf.grad, dtype=torch.float64) for leaf in result.leaves if leaf.grad is not None}
    assert set(grads) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    for name, expected in {"fc1.weight": d_w1, "fc1.bias": d_b1, "fc2.weight": d_w2, "fc2.bias": d_b2}.items():
        assert torch.allclose(grads[name], expected, rtol=1e-12, atol=1e-14), name
    assert torch.allclose(model.fc1.weight.grad, d_w1, rtol=1e-12, atol=1e-14)  # the model's own .grad too


def test_mlp_json_matches_a_direct_grad_fn_walk(cli):
    result = cli("trace", MLP, "--var", "x=randn(2,3)", "--loss", "out.sum()", "--seed", "0", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    import importlib.util

    spec = importlib.util.spec_from_file_location("mlp_for_walk", MODELS / "mlp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.MLP()(torch.randn(2, 3)).sum()
    assert json_walk(document) == direct_walk(out.grad_fn)
    nodes = document["nodes"]
    assert {k for k in nodes[1]} >= {"module", "module_class", "file", "line", "code"}
    assert nodes[1]["module"] == "fc2" and nodes[1]["line"] == line_of(MODELS / "mlp.py", "return self.fc2(h)")
    assert document["target"]["kind"] == "module"
    assert [m["path"] for m in document["modules"]] == ["", "fc1", "act", "fc2"]
    assert document["modules"][1] == {"path": "fc1", "class": "Linear", "parameters": 16, "inputs": [[2, 3]], "output": [[2, 4]]}



def test_module_table_counts_each_modules_parameters_as_torch_does_with_tied_and_shared_weights():
    """`parameters` of a module is `module.parameters()`'s size: a tied weight and a module
    held at two paths counted once in each module's tree, as torch's own iterator counts them."""
    from torch import nn

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight
            shared = nn.Linear(4, 4)
            self.a = nn.Sequential(shared, nn.ReLU())
            self.b = nn.Sequential(nn.Linear(4, 4), shared)

        def forward(self, ids):
            return self.head(self.b(self.a(self.emb(ids))))

    model = Tied()
    document = json.loads(gradcli.trace(model, ids=torch.tensor([1, 2, 3])).to_json())
    truth = {path: sum(p.numel() for p in module.parameters()) for path, module in model.named_modules()}
    assert {m["path"]: m["parameters"] for m in document["modules"]} == truth
    assert truth[""] == 40 + 20 + 20  # the premise: the tie and the shared Linear are each counted once

# -- larger models: json = direct walk, gradients = torch's own backward ----------------------------
CASES = {
    "cnn": ("SmallCNN", ["x=randn(2,1,8,8)", "labels=randint(0,3,(2,))"], "cross_entropy(out, labels)",
            lambda: (torch.randn(2, 1, 8, 8),), "x"),
    "lstm": ("Tagger", ["ids=randint(0,20,(2,5))"], "out.pow(2).mean()", None, "ids"),
    "transformer": ("Encoder", ["ids=randint(0,20,(2,6))", "labels=randint(0,2,(2,))"], "cross_entropy(out, labels)", None, "ids"),
}


def _same_model_by_hand(name: str, seed: int, variables: list[str], loss_text: str):
    """The same model, inputs and loss, built with torch directly in the order gradcli builds them."""
    import importlib.util

    from gradcli.interpret.variables import make_tensor, parse_var

    spec = importlib.util.spec_from_file_location(f"nets_{name}", NETS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(module, name)()
        generator = torch.Generator().manual_seed(seed)
        specs = [parse_var(v) for v in variables]
        # gradcli makes forward's inputs first (in signature order), then the --loss-only ones.
        forward_names = {"SmallCNN": ["x"], "Tagger": ["ids"], "Encoder": ["ids"]}[name]
        ordered = sorted(specs, key=lambda s: (s.name not in forward_names))
        values = {s.name: make_tensor(s, dtype=torch.float32, device="cpu", generator=generator).detach() for s in ordered}
        out = model(*(values[n] for n in forward_names))
    F = torch.nn.functional
    loss = F.cross_entropy(out, values["labels"]) if "cross_entropy" in loss_text else out.pow(2).mean()
    return model, loss


@pytest.mark.parametrize("case", list(CASES))
def test_real_models_json_walk_origins_and_gradients(case, cli):
    name, variables, loss, _, data_input = CASES[case]
    args = ["trace", f"{NETS}:{name}", *sum((["--var", v] for v in variables), []), "--loss", loss, "--seed", "3", "--json"]
    result = cli(*args)
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    model, expected_loss = _same_model_by_hand(name, 3, variables, loss)
    assert document["result"]["value"] == pytest.approx(expected_loss.item(), rel=1e-6)
    assert json_walk(document) == direct_walk(expected_loss.grad_fn)
    # Every operation node comes from a line of nets.py (or the --loss), inside a module.
    for node in document["nodes"]:
        if node["name"] == ACCUMULATE_GRAD:
            assert node["module"] is not None, node
            continue
        assert node["file"] in (str(NETS), "--loss"), node
        if node["file"] == str(NETS):
            assert node["module_class"] is not None and node["code"], node
    expected_loss.backward()
    leaves = {leaf["name"]: leaf for leaf in document["leaves"]}
    for pname, parameter in model.named_parameters():
        got = torch.tensor(leaves[pname]["grad"])
        assert torch.allclose(got, parameter.grad, rtol=1e-5, atol=1e-6), pname
    assert leaves[data_input]["requires_grad"] is False


def test_cnn_nodes_name_conv_batchnorm_and_pool_modules():
    result = gradcli.trace(f"{NETS}:SmallCNN", ["x=randn(2,1,8,8)", "labels=randint(0,3,(2,))"], loss="cross_entropy(out, labels)", seed=0)
    line = line_of(NETS, "h = self.pool(torch.relu(self.bn(self.conv(x))))")
    by_name = {n.name: n.origin for n in result.graph.nodes}
    assert (by_name["ConvolutionBackward0"].module, by_name["ConvolutionBackward0"].line) == ("conv", line)
    assert by_name["NativeBatchNormBackward0"].module == "bn"
    assert by_name["MaxPool2DWithIndicesBackward0"].module_class == "MaxPool2d"
    assert by_name["ReluBackward0"].module_class == "SmallCNN" and by_name["ReluBackward0"].line == line
    assert by_name["LogSoftmaxBackward0"].file == "--loss"  # made inside cross_entropy: its line


def test_embedding_fed_integer_ids_is_data_and_its_node_names_the_line():
    result = gradcli.trace(f"{NETS}:Tagger", ["ids=randint(0,20,(2,5))"], loss="out.sum()", seed=0)
    ids = next(leaf for leaf in result.leaves if leaf.name == "ids")
    assert ids.dtype == "int64" and ids.requires_grad is False and ids.grad is None
    embedding = next(n for n in result.graph.nodes if n.name == "EmbeddingBackward0")
    assert (embedding.origin.module, embedding.origin.line) == ("embed", line_of(NETS, "e = self.embed(ids)"))


# -- kinds of NAME --------------------------------------------------------------------------
def test_torch_nn_linear_is_a_module_target(cli):
    result = cli("trace", "torch.nn:Linear", "--init", "in_features=3", "--init", "out_features=2",
                 "--var", "input=randn(4,3)", "--loss", "out.sum()", "--seed", "0")
    assert result.exit_code == 0, result.stderr
    assert "found: nn.Module subclass Linear, constructed as Linear(in_features=3, out_features=2)" in result.stdout
    assert "parameters: 2 tensors, 8 values, 2 require grad" in result.stdout


def test_a_large_gradient_is_a_summary_in_every_pass_as_in_its_leaf(cli):
    """A 60x200 weight (12,000 gradients): each pass gives it as a summary, as its leaf does,
    while the 60-element bias stays whole; the numbers are torch's own backward's."""
    args = ["torch.nn:Linear", "--init", "in_features=200", "--init", "out_features=60",
            "--var", "input=ones(3,200)", "--loss", "out.sum()", "--seed", "0", "--repeat", "2", "--retain-graph"]
    result = cli("trace", *args, "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    linear = torch.nn.Linear(200, 60)
    linear(torch.ones(3, 200)).sum().backward()
    first, second = (p["grads"]["weight"] for p in document["passes"])
    assert first["numel"] == 12_000 and first["shape"] == [60, 200]
    assert first["preview"] == linear.weight.grad.reshape(-1)[:6].tolist()
    assert first["norm"] == pytest.approx(float(linear.weight.grad.double().norm()), rel=1e-12)
    # .grad accumulates: the second pass doubles it, and the leaf keeps the last pass's
    grad = linear.weight.grad.double()
    assert [first["min"], first["max"]] == pytest.approx([float(grad.min()), float(grad.max())], rel=1e-12)
    assert first["mean"] == pytest.approx(float(grad.mean()), rel=1e-12)
    assert second == {**first, "preview": [2 * v for v in first["preview"]], "norm": 2 * first["norm"],
                      "min": 2 * first["min"], "max": 2 * first["max"], "mean": 2 * first["mean"]}
    assert next(leaf for leaf in document["leaves"] if leaf["name"] == "weight")["grad"] == second
    assert [p["grads"]["bias"] for p in document["passes"]] == [(linear.bias.grad * k).tolist() for k in (1, 2)]
    text = cli("trace", *args)
    assert text.exit_code == 0, text.stderr
    assert ".grad of weight: [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, …] (shape [60, 200], float32, min 3.0, max 3.0, mean 3.0)" in text.stdout


@pytest.mark.parametrize(("name", "extra", "found"), [
    ("make_mlp", ["--init", "hidden=5"], "model factory make_mlp, called as make_mlp(hidden=5) -> MLP"),
    ("model", [], "nn.Module instance of MLP"),
    ("MLP", ["--init", "sizes=(3, 6, 2)"], "nn.Module subclass MLP, constructed as MLP(sizes=(3, 6, 2))"),
    ("squared_norm", ["--var", "w=randn(3)"], "function squared_norm, called with the inputs"),
])
def test_each_kind_of_name_is_found_and_said(cli, name, extra, found):
    loss = [] if name == "squared_norm" else ["--loss", "out.sum()"]
    result = cli("trace", f"{MODELS / 'mlp.py'}:{name}", "--var", "x=randn(2,3)", *extra, *loss)
    assert result.exit_code == 0, result.stderr
    assert f"found: {found}" in result.stdout


def test_a_function_s_tensor_inputs_require_grad_and_get_their_gradient():
    result = gradcli.trace(f"{MODELS / 'mlp.py'}:squared_norm", ["x=[1.0, 2.0]", "w=[3.0, -1.0]"])
    leaves = {leaf.name: leaf for leaf in result.leaves}
    # d/dx sum((x*w)^2) = 2 x w^2
    assert leaves["x"].grad == [18.0, 4.0] and leaves["w"].grad == [6.0, -8.0]  # and 2 w x^2


def test_wrt_makes_a_module_input_require_grad():
    result = gradcli.trace(MLP, ["x=randn(2,3)"], loss="out.sum()", wrt=["x"], seed=0)
    x = next(leaf for leaf in result.leaves if leaf.name == "x")
    assert x.requires_grad and x.grad is not None and len(x.grad) == 2


def test_dtype_converts_model_and_inputs():
    result = gradcli.trace(MLP, ["x=randn(2,3)"], loss="out.sum()", dtype="float64", seed=0)
    assert {leaf.dtype for leaf in result.leaves} == {"float64"}


@pytest.mark.parametrize(("args", "message"), [
    ([MLP], "needs the input 'x': forward(x)"),
    ([MLP, "--var", "x=randn(2,3)", "--var", "y=randn(2)"], "has no input 'y'"),  # x given: y is extra
    ([MLP, "--var", "y=randn(2,3)", "--var", "z=randn(2)"], "has no input 'y'"),  # which one is x?
    ([MLP, "--init", "sizes=[1,"], "is not a Python literal"),
    ([f"{MODELS / 'mlp.py'}:Nope"], "has no 'Nope'"),
    (["no_such_module_xyz:Net"], "no module named 'no_such_module_xyz'"),
    ([f"{MODELS / 'mlp.py'}:torch", "--var", "x=1.0"], "is a module value"),
])
def test_bad_targets_and_inputs_exit_2_with_a_message(cli, args, message):
    result = cli("trace", *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_input_prints_the_signature_and_an_example(cli):
    result = cli("trace", MLP)
    assert result.exit_code == 2
    assert "forward(x)" in result.stderr and "--var 'x=randn(2, 3)'" in result.stderr


def test_an_lstm_state_nested_in_the_output_is_named_by_its_path_for_the_loss(cli, tmp_path):
    path = tmp_path / "tagger.py"
    path.write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Tagger(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.lstm = nn.LSTM(3, 4, batch_first=True)\n\n"
        "    def forward(self, x):\n        return self.lstm(x)  # (output, (h_n, c_n))\n"
        "\n\ndef state(x):\n    return {'y': x * 2, 'state': (x.sin(), [x.cos()])}\n"
    )
    result = cli("trace", f"{path}:Tagger", "--var", "x=randn(2,5,3)", "--loss", "out_1_0.sum()", "--json")
    assert result.exit_code == 0, result.stderr
    leaves = {leaf["name"]: leaf for leaf in json.loads(result.stdout)["leaves"]}
    # By hand: the same weights and input, h_n.sum() differentiated by torch.
    lstm = torch.nn.LSTM(3, 4, batch_first=True)
    with torch.no_grad():
        for name, p in lstm.named_parameters():
            p.copy_(torch.tensor(leaves[f"lstm.{name}"]["value"]))
    _, (h_n, _) = lstm(torch.tensor(leaves["x"]["value"]))
    h_n.sum().backward()
    for name, p in lstm.named_parameters():
        torch.testing.assert_close(torch.tensor(leaves[f"lstm.{name}"]["grad"]), p.grad, rtol=1e-5, atol=1e-7)
    # Without --loss only the top level counts; the nested names are offered for --loss.
    names = cli("trace", f"{path}:Tagger", "--var", "x=randn(2,5,3)", "--loss", "missing.sum()")
    assert names.exit_code == 2 and "names here: x, out, out_1_0, out_1_1" in names.stderr
    nested = cli("trace", f"{path}:state", "--var", "x=[0.5, 1.0]", "--loss", "state_0.sum() + state_1_0.sum()", "--json")
    assert nested.exit_code == 0, nested.stderr
    grad = json.loads(nested.stdout)["leaves"][0]["grad"]
    assert grad == pytest.approx([math.cos(0.5) - math.sin(0.5), math.cos(1.0) - math.sin(1.0)])


def test_a_tuple_output_needs_a_choice_listing_its_names(cli, tmp_path):
    path = tmp_path / "pair.py"
    path.write_text("import torch\n\ndef pair(x):\n    return x * 2, x.sin()\n")
    result = cli("trace", f"{path}:pair", "--var", "x=randn(3)")
    assert result.exit_code == 2
    assert "2 tensors (out, out_1)" in result.stderr
    chosen = cli("trace", f"{path}:pair", "--var", "x=[0.0, 1.0]", "--loss", "out.sum() + out_1.sum()", "--json")
    assert chosen.exit_code == 0, chosen.stderr
    leaves = json.loads(chosen.stdout)["leaves"]
    assert leaves[0]["grad"] == pytest.approx([3.0, 2 + 0.5403023058681398])  # 2 + cos(x)


# -- errors in real code --------------------------------------------------------------------
def test_inplace_on_a_saved_tensor_names_the_tensor_and_both_lines(cli):
    result = cli("trace", f"{EXAMPLE}:ResidualMLP", "--var", "x=randn(4,4)", "--loss", "out.pow(2).mean()", "--json")
    assert result.exit_code == 1
    error = json.loads(result.stdout)["passes"][0]["error"]
    details = error["details"]
    assert details["shape"] == [4, 8] and details["version"] == 1 and details["expected_version"] == 0
    assert details["saved_by_name"] == "ReluBackward0"
    assert details["saved_at"]["line"] == line_of(EXAMPLE, "out = self.act(self.fc(x))")
    assert details["saved_at"]["module"] == "block.act"
    assert details["modified_at"]["line"] == line_of(EXAMPLE, "out += x  # the bug")
    assert details["modified_by"] == "add_"
    assert "out of place" in error["fix"]


def test_a_folded_module_says_a_saved_tensor_inside_was_modified(cli):
    result = cli("trace", f"{EXAMPLE}:ResidualMLP", "--var", "x=randn(4,4)", "--loss", "out.sum()", "--depth", "0")
    assert result.exit_code == 1
    assert "▸ block (Block)  6 nodes, 72 parameters, in [4, 8] → out [4, 8]  ◀ a saved tensor inside was modified" in result.stdout


def test_inplace_on_sigmoid_output_is_found_from_the_console(cli):
    result = cli("trace", f"{BROKEN}:SigmoidScaled", "--var", "x=randn(2,3)")
    assert result.exit_code == 1
    assert f"broken.py:{line_of(BROKEN, 'p = torch.sigmoid(self.fc(x))')}" in result.stdout
    assert f"mul_() at broken.py:{line_of(BROKEN, 'p.mul_(2)')}" in result.stdout


@pytest.mark.parametrize(("name", "how", "marker"), [
    ("ItemRoundTrip", "item()", "score = self.fc(x).mean().item()"),
    ("NoGrad", "torch.no_grad()", "h = self.fc(x)  # under no_grad"),
    ("Detached", "detach()", "h = self.fc(x).detach()"),
    ("ArgmaxLoss", "argmax() (an integer result)", "return self.fc(x).argmax(dim=1).float().mean()"),
    ("DataLoss", ".data", "return (self.fc(x).data ** 2).sum()"),
])
def test_an_output_without_grad_fn_says_where_the_graph_was_cut(cli, name, how, marker):
    result = cli("trace", f"{BROKEN}:{name}", "--var", "x=randn(2,3)", "--json")
    assert result.exit_code == 1
    error = json.loads(result.stdout)["passes"][0]["error"]
    assert "does not require grad" in error["message"]
    cut = error["details"]["cuts"][-1] if name != "ArgmaxLoss" else error["details"]["cuts"][0]
    assert cut["how"] == how
    assert cut["at"]["line"] == line_of(BROKEN, marker)


def test_backward_twice_on_a_model_is_explained(cli):
    result = cli("trace", MLP, "--var", "x=randn(2,3)", "--loss", "out.sum()", "--repeat", "2")
    assert result.exit_code == 1
    assert "fix: --retain-graph" in result.stdout


def test_a_non_scalar_output_without_loss_is_explained_with_the_fix(cli):
    result = cli("trace", MLP, "--var", "x=randn(2,3)")
    assert result.exit_code == 1
    assert "grad can be implicitly created only for scalar outputs" in result.stdout
    assert "The output has shape [2, 2], not a scalar" in result.stdout
    assert "--loss" in result.stdout


def test_an_exception_in_forward_shows_only_the_user_s_frames(cli):
    result = cli("trace", f"{BROKEN}:WrongShape", "--var", "x=randn(2,3)")
    assert result.exit_code == 2
    err = result.stderr
    assert f'File "{BROKEN}", line {line_of(BROKEN, "return helper(self.fc, x)")}, in forward' in err
    assert f'line {line_of(BROKEN, "return layer(x.t())")}, in helper' in err
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in err
    assert "gradcli/" not in err and "torch/" not in err and "Traceback" not in err


def test_an_import_error_shows_only_the_user_s_frames(cli):
    path = ROOT / "tests" / "fixtures" / "broken_import.py"
    result = cli("trace", f"{path}:Never")
    assert result.exit_code == 2
    assert f'File "{path}", line 5, in <module>' in result.stderr and "VALUE = 1 / 0" in result.stderr
    assert "importlib" not in result.stderr and "gradcli/" not in result.stderr


# -- flow, folding, DOT, API ----------------------------------------------------------------
def test_flow_marks_the_first_nonfinite_gradient_and_forward_value(cli):
    result = cli("trace", f"{BROKEN}:LogOfZero", "--var", "x=randn(2,3)", "--flow", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    forward = document["forward_nonfinite"]
    assert forward["call"] == "log" and forward["node"] == "LogBackward0"
    assert forward["line"] == line_of(BROKEN, "gap = torch.log(h - h)") and forward["module_class"] == "LogOfZero"
    origin = next(n for n in document["nodes"] if n["id"] == document["nonfinite_origin"])
    assert origin["name"] == "MulBackward0" and origin["line"] == line_of(BROKEN, "return (gap * h).sum()")


def test_flow_on_a_healthy_model_says_forward_was_finite(cli):
    result = cli("trace", MLP, "--var", "x=randn(2,3)", "--loss", "out.sum()", "--flow")
    assert result.exit_code == 0
    assert "every value forward computed was finite" in result.stdout


def test_depth_folds_deeper_modules_into_one_line(cli):
    deep = f"{NETS}:Deep"
    folded = cli("trace", deep, "--var", "x=randn(2,4)", "--loss", "out.sum()", "--depth", "0")
    assert folded.exit_code == 0
    assert "▸ blocks (Sequential)  15 nodes, 60 parameters, in [2, 4] → out [2, 4]" in folded.stdout
    opened = cli("trace", deep, "--var", "x=randn(2,4)", "--loss", "out.sum()", "--depth", "3")
    assert "▸" not in opened.stdout and "blocks.2.1 (Tanh)" in opened.stdout
    middle = cli("trace", deep, "--var", "x=randn(2,4)", "--loss", "out.sum()")  # --depth 1
    assert "▸ blocks.2 (Sequential)  5 nodes, 20 parameters, in [2, 4] → out [2, 4]" in middle.stdout
    assert "stem (Linear)" in middle.stdout and "▸ stem" not in middle.stdout


def test_dot_draws_modules_as_clusters(cli):
    result = cli("trace", MLP, "--var", "x=randn(2,3)", "--loss", "out.sum()", "--dot", "-")
    assert result.exit_code == 0
    text = result.stdout
    assert 'label="fc1 (Linear)"' in text and 'label="fc2 (Linear)"' in text
    assert text.count("subgraph cluster_") == 4  # the model, fc2, act, fc1
    assert "mlp.py:15" in text


def test_python_api_takes_a_module_and_tensors_and_renders_itself():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh())
    x = torch.tensor([[1.0, 2.0, 3.0]])
    result = gradcli.trace(model, x, loss="out.sum()")
    document = json.loads(result.to_json())
    assert document["target"]["found"] == "nn.Module instance of Sequential"
    assert [n["module"] for n in document["nodes"] if n["name"] == "TanhBackward0"] == ["1"]
    assert result.to_dot().startswith("digraph autograd {")
    assert "TanhBackward0" in str(result)
    html = result._repr_html_()
    assert html.startswith("<div><?xml") or html.startswith("<pre>")
    expected = (1 - torch.tanh(model[0](x)) ** 2).detach()  # d/dbias of sum(tanh(Wx + b))
    assert torch.allclose(model[0].bias.grad, expected[0])


def test_importable_module_targets_for_trace_and_check_function(cli, tmp_path, monkeypatch):
    (tmp_path / "user_ops_for_gradcli.py").write_text(
        "import torch\n\n\n"
        "class Holder:\n"
        "    class Cube(torch.autograd.Function):\n"
        "        @staticmethod\n"
        "        def forward(ctx, x):\n"
        "            ctx.save_for_backward(x)\n"
        "            return x**3\n\n"
        "        @staticmethod\n"
        "        def backward(ctx, grad):\n"
        "            (x,) = ctx.saved_tensors\n"
        "            return grad * 3 * x**2\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    checked = cli("check-function", "user_ops_for_gradcli:Holder.Cube", "--ref", "x**3")
    assert checked.exit_code == 0, checked.stdout + checked.stderr
    traced = cli("trace", "user_ops_for_gradcli:Holder.Cube", "--var", "x=[1.0, 2.0]", "--loss", "out.sum()", "--json")
    assert traced.exit_code == 0, traced.stderr
    document = json.loads(traced.stdout)
    assert document["target"]["found"] == "torch.autograd.Function Cube, called through .apply"
    assert document["leaves"][0]["grad"] == [3.0, 12.0]
    assert [n["name"] for n in document["nodes"]][:2] == ["SumBackward0", "CubeBackward"]


_PRINTING_MODEL = '''
import torch
from torch import nn


class Chatty(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        print("forward saw", tuple(x.shape))
        return self.fc(x)
'''


def test_a_model_that_prints_leaves_json_and_dot_on_stdout_alone(cli, tmp_path):
    # A print in forward is the user's, as `python model.py` would show it: on stderr when
    # stdout carries a document, or `--json` would no longer parse.
    (tmp_path / "chatty_trace_model.py").write_text(_PRINTING_MODEL)
    target = f"{tmp_path / 'chatty_trace_model.py'}:Chatty"
    args = [target, "--var", "x=randn(4, 3)", "--loss", "out.sum()", "--seed", "0"]
    result = cli("trace", *args, "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["result"]["shape"] == []
    assert "forward saw (4, 3)" in result.stderr
    dot = cli("trace", *args, "--dot", "-")
    assert dot.stdout.startswith("digraph") and "forward saw" not in dot.stdout
    text = cli("trace", *args)
    assert "forward saw (4, 3)" in text.stdout and text.stderr == ""


@pytest.mark.parametrize("command", ["trace", "grads"])
def test_a_file_without_name_says_to_name_the_model_in_it(cli, command):
    # `gradcli trace model.py` read as an expression was "attribute access is not part of the
    # language": the user meant their file, and what is missing is :NAME.
    result = cli(command, f"{MODELS / 'mlp.py'}", "--var", "x=randn(2, 4)")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: '{MODELS / 'mlp.py'}' is a file: name the model or function in it, "
                                    f"{MODELS / 'mlp.py'}:NAME\n")
    assert result.stdout == ""


def test_a_syntax_error_in_the_users_file_shows_the_line_and_caret_as_python_does(cli, tmp_path):
    (tmp_path / "typo_model.py").write_text("import torch\n\nclass Net(torch.nn.Module:\n    pass\n")
    result = cli("trace", f"{tmp_path / 'typo_model.py'}:Net")
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: importing {tmp_path / 'typo_model.py'} raised SyntaxError: invalid syntax (typo_model.py, line 3)\n"
        f'  File "{tmp_path / "typo_model.py"}", line 3\n'
        "    class Net(torch.nn.Module:\n"
        "                             ^\n"
        "SyntaxError: invalid syntax\n"
    )


def test_a_function_target_s_node_is_not_put_down_to_the_loss(cli, tmp_path):
    # The node MemSwish.apply made belongs to forward; only the sum is --loss's. The walk that
    # tags the loss's nodes went on below the output and gave it `--loss:1  out.sum()`.
    (tmp_path / "apply_target_ops.py").write_text(
        "import torch\n\n\nclass Twice(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
        "        return 2 * x\n\n    @staticmethod\n    def backward(ctx, g):\n        return 2 * g\n"
    )
    result = cli("trace", f"{tmp_path / 'apply_target_ops.py'}:Twice", "--var", "x=[1.0, 2.0]", "--loss", "out.sum()",
                 "--json")
    assert result.exit_code == 0, result.stderr
    nodes = {n["name"]: n for n in json.loads(result.stdout)["nodes"]}
    assert (nodes["SumBackward0"]["file"], nodes["SumBackward0"]["code"]) == ("--loss", "out.sum()")
    assert (nodes["TwiceBackward"]["file"], nodes["TwiceBackward"]["code"]) == (None, None)


def test_several_outputs_hint_offers_only_floating_ones(cli, tmp_path):
    (tmp_path / "logits_and_pred_model.py").write_text(
        "from torch import nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(4, 2)\n\n    def forward(self, x):\n        y = self.fc(x)\n"
        "        return {'logits': y, 'pred': y.argmax(1), 'scaled': 2 * y}\n"
    )
    result = cli("trace", f"{tmp_path / 'logits_and_pred_model.py'}:Net", "--var", "x=randn(3, 4)")
    assert result.exit_code == 2
    assert result.stderr == ("error: the output holds 3 tensors (logits, pred, scaled): say which to differentiate\n"
                             "hint: e.g. --loss 'logits.sum()', or combine them: --loss 'logits.sum() + scaled.sum()'\n")


def test_init_values_are_python_literals_and_a_bare_word_is_a_string():
    from gradcli.errors import UsageError
    from gradcli.targets.construct import parse_init

    assert parse_init(["width=16", "sizes=(3, 4)", "act=relu", "name='gelu'", "bias=False"]) == {
        "width": 16, "sizes": (3, 4), "act": "relu", "name": "gelu", "bias": False}
    for bad in ("width", "2x=3", "act=re lu"):
        with pytest.raises(UsageError):
            parse_init([bad])


BACKWARD_RAISES = """
import torch
from torch import nn


class Boom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.reshape(2, 2)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return Boom.apply(self.lin(x))
"""


def test_a_backward_that_raises_during_the_pass_is_shown_at_the_users_line(cli, tmp_path):
    path = tmp_path / "boom.py"
    path.write_text(BACKWARD_RAISES)
    result = cli("trace", f"{path}:Net", "--var", "x=randn(2,3)", "--loss", "out.sum()", "--json")
    assert result.exit_code == 1
    (failed,) = [p for p in json.loads(result.stdout)["passes"] if p["error"] is not None]
    assert failed["error"]["message"] == "shape '[2, 2]' is invalid for input of size 6"
    assert failed["error"]["explanation"] == ("your code raised this while autograd ran it, at boom.py line 15: "
                                              "return g * x.reshape(2, 2)")
    # torch's own errors keep their explanation: the graph freed by the first pass.
    again = cli("trace", "x.pow(2).sum()", "--var", "x=[1.0, 2.0]", "--repeat", "2", "--json")
    explained = [p["error"]["explanation"] for p in json.loads(again.stdout)["passes"] if p["error"] is not None]
    assert explained and explained[0].startswith("The previous pass freed the tensors")
