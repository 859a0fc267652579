"""Every `--json` document matches docs/json.md key by key, both ways.

Real runs of each command (chosen so that together they produce every documented key) are
walked against the page's tables: a produced key without a row, a value of another type than
written, or a row no run produces fails with the key and the table named.
"""

from __future__ import annotations

import json

import pytest

from json_docs import Checker, read_tables
from paths import ROOT
from shared_runs import RUNS as SHARED, shared_json_run


# (the table of the document, the arguments, the expected exit status)
RUNS = [
    ("trace", ["trace", "h = x*x; sqrt(h).sum()", "--var", "x=[0.0, 1.0]", "--flow", "--create-graph",
               "--retain-grad", "h"], 1),
    ("trace", ["trace", "x.pow(2).sum()", "--var", "x=[1.0, 2.0]", "--repeat", "2"], 1),
    ("trace", ["trace", "h = x.exp(); (h*y).sum()", "--mode", "grad", "--wrt", "x", "--seed", "0"], 0),
    ("trace", ["trace", "(2*x).sum()", "--create-graph"], 0),
    # --symbolic: one symbol per tensor, with --create-graph's second derivatives, one symbol per
    # element (softmax couples them), and an operation torch runs through an inner node (2/x).
    ("trace", ["trace", "h = x*sigmoid(x); y = h*h + h; y.sum()", "--var", "x=[0.5, 2.0]", "--symbolic"], 0),
    ("trace", ["trace", "h = x*sigmoid(x); y = h*h + h; y.sum()", "--var", "x=[0.5, 2.0]", "--symbolic",
               "--create-graph"], 0),
    ("trace", ["trace", "(softmax(x, dim=0) * w).sum()", "--var", "x=[1.0, 2.0, 3.0]", "--var", "w=[0.5, -1.0, 2.0]",
               "--symbolic"], 0),
    ("trace", ["trace", "h = 2/x; (h*x.exp()).sum()", "--var", "x=[0.5, 2.0]", "--symbolic"], 0),
    # --symbolic --create-graph through where(...): the mask is a constant of the gradient's graph.
    ("trace", ["trace", "where(x > 0, x*x*x, x).sum()", "--var", "x=[-0.5, 2.0]", "--symbolic", "--create-graph"], 0),
    ("check", ["check", "relu(x)*y", "--order", "2", "--points", "20", "--seed", "0"], 0),
    ("check", ["check", "softmax(log(1+exp(x)), dim=0)", "--var", "x=[1000.0, 1.0, 2.0]"], 1),
    ("check", ["check", "softmax(x, dim=0)", "--var", "x=randn(40)", "--seed", "0"], 0),
    ("check", ["check", "sqrt(sum(x**2, dim=1)).sum()", "--var", "x=[[0.0, 0.0], [1.0, 2.0]]"], 0),
    ("check", ["check", "swish(x)"], 0),
    ("check", ["check", "log(1+exp(x))", "--var", "x=linspace(-1000,1000,2001)"], 1),
    ("check all", ["check", "--all"], 0),
    ("check-function", ["check-function", "examples/swish.py:Swish", "--ref", "x*sigmoid(x)", "--order", "2"], 0),
    ("check-function", ["check-function", "examples/swish_saved_sigmoid.py:Swish", "--ref", "x*sigmoid(x)",
                        "--order", "2"], 1),
    # Typed arguments (an int, a long tensor, invented ones) and skipped outputs of every status.
    ("check-function", ["check-function", "examples/typed_functions.py:SoftmaxArgmax", "--var",
                        "x=[[1.0, 2.0], [0.5, -1.0]]"], 0),
    ("check-function", ["check-function", "tests/fixtures/typed_functions.py:TanhWithStatsSquareWrong", "--output", "0"], 0),
    ("check-function", ["check-function", "examples/typed_functions.py:SoftmaxCrossEntropy", "--var",
                        "logits=randn(3, 4)", "--var", "target=randint(0, 4, (3,))", "--seed", "1"], 0),
    ("check-function", ["check-function", "tests/fixtures/typed_functions.py:Scale", "--var", "scale=none"], 0),
    # Issue 16: a one-hot sparsemax tests nothing (exit 1); entmax's nan at order 2 is described as seen.
    ("check-function", ["check-function", "tests/fixtures/verdict_functions.py:Sparsemax", "--var", "x=[5.0, 0.0, -1.0]",
                        "--order", "2"], 1),
    ("check-function", ["check-function", "tests/fixtures/verdict_functions.py:Entmax15", "--var",
                        "x=[1.0, 0.5, -2.0]", "--order", "2"], 1),
    # Issue 16's forward mode, torch.func, the contract audit and declared gradients.
    ("check-function", ["check-function", "tests/fixtures/transform_functions.py:SwishWrongBackward"], 1),
    ("check-function", ["check-function", "tests/fixtures/transform_functions.py:JvpWithoutSaveForForward"], 1),
    ("check-function", ["check-function", "tests/fixtures/transform_functions.py:RoundTimesWeight",
                        "--expect-grad", "x=grad_output*w"], 0),
    ("list", ["list"], 0),
    # An entry without link or derivative (their null), a leaf no pass reaches (its grad null),
    # and a grads run whose backward raises (its `error`): values no other run produced.
    ("list", ["list", "--library", "tests/fixtures/library_bare"], 0),
    ("trace", ["trace", "h = y*0; (x*x).sum()", "--var", "x=[1.0]", "--var", "y=[2.0]"], 0),
    ("grads", ["grads", "tests/fixtures/models/broken.py:SigmoidScaled", "--var", "x=randn(2,3)", "--loss", "out.sum()",
               "--seed", "0"], 1),
    # Discovery (issue 16): a package (found, skipped, unimportable) and a model (calls).
    ("check-function discovery", ["check-function", "tests/fixtures/discover_pkg"], 1),
    # issue 24: a module of the package that raises on import (unimportable); discover_pkg's
    # missing optional dependency is a note.
    ("check-function discovery", ["check-function", "tests/fixtures/broken_pkg"], 1),
    ("check-function discovery", ["check-function", "tests/fixtures/discover_model.py:TwoFunctions", "--var", "x=randn(2,4)"], 1),
    # Code targets (issue 13): origins per node, the in-place details, a cut, summaries, --flow.
    ("trace", ["trace", "examples/residual_mlp.py:ResidualMLP", "--var", "x=randn(4,4)", "--loss", "out.pow(2).mean()",
               "--seed", "0"], 1),
    ("trace", ["trace", "tests/fixtures/models/broken.py:Detached", "--var", "x=randn(2,3)", "--seed", "0"], 1),
    ("trace", ["trace", "tests/fixtures/models/broken.py:LogOfZero", "--var", "x=randn(2,3)", "--flow", "--seed", "0"], 1),
    # issue 15: a finite gradient that lost its digits to cancellation, at its node and line.
    ("trace", ["trace", "examples/nan_causes.py:Cancellation", "--var", "x=[[0.1], [0.001], [1e-5], [1e-7]]",
               "--dtype", "float64", "--flow"], 1),
    ("trace", ["trace", "torch.nn:Linear", "--init", "in_features=200", "--init", "out_features=60",
               "--var", "input=randn(2,200)", "--loss", "out.sum()", "--seed", "0"], 0),
    # grads (issue 14): steps, findings with and without a line, a non-finite origin, frozen parameters.
    ("grads", ["grads", "examples/grads/classifier.py:Net", "--var", "x=randn(4, 3, 8, 8)", "--loss", "out.pow(2).mean()",
               "--steps", "2", "--seed", "0"], 1),
    ("grads", ["grads", "examples/grads/faults.py:LogOfSoftmax", "--var", "x=randn(4, 8)", "--seed", "0"], 1),
    ("grads", ["grads", "examples/grads/faults.py:FrozenBackbone", "--var", "x=randn(4, 8)", "--loss", "out.pow(2).mean()",
               "--depth", "0"], 0),
    # memory (issue 28): a proven checkpoint; a backward that raises (its error and problem).
    ("memory", ["memory", "examples/memory/mlp.py:DeepMLP", "--init", "depth=2", "--var", "x=randn(8, 128)", "--loss",
                "out.pow(2).mean()", "--checkpoint", "1", "--depth", "1", "--seed", "0"], 0),
    ("memory", ["memory", "tests/fixtures/models/broken.py:SigmoidScaled", "--var", "x=randn(2,3)", "--loss", "out.sum()",
                "--seed", "0"], 1),
    # compare (issue 26): GradScaler's steps, a float16 underflow, where it starts and why.
    ("compare", ["compare", "examples/compare/models.py:MLP", "--var", "x=randn(16, 32)", "--loss", "1e-7 * out.pow(2).mean()",
                 "--amp", "float16", "--seed", "0"], 1),
    ("compare", ["compare", "examples/compare/models.py:MLP", "--var", "x=randn(16, 32)", "--loss", "out.pow(2).mean()",
                 "--amp", "float16", "--scaler", "--seed", "0"], 0),
    # issue 27: two real process groups (gloo, 2 ranks): a cause proven by its rerun, and ranks
    # that disagree after DDP left a bucket unreduced.
    ("compare ddp", ["compare", "examples/distributed/models.py:WithBatchNorm", "--var", "x=randn(16, 8)", "--loss",
                     "out.pow(2).mean()", "--ddp", "2", "--clip-grad-norm", "0.1", "--seed", "0"], 1),
    # plot and demo (issue 33): a kink, a variable held fixed, autograd wrong (its problem); a
    # demo's checks, one of them failing.
    ("plot", ["plot", "relu(x)*y + log(1+exp(x))", "--var", "x=linspace(-1000,1000,2001)", "--var", "y=2.0"], 1),
    ("demo", ["demo", "graph"], 0),
    ("demo", ["demo", "swish", "--buggy"], 1),
    ("grads", ["grads", "examples/distributed/models.py:AuxHead", "--var", "x=randn(16, 8)", "--loss", "out.pow(2).mean()",
               "--ddp", "2", "--seed", "0"], 1),
]


# watch (issue 34): a stop found by rerunning the script, with an overflowing norm before it; spikes
# (warnings: exit 0). Issue 44: each silent bug of examples/watch/silent.py (its keys), exit 1.
WATCH_RUNS = [
    (["examples/watch/train.py", "--fault", "lr", "--steps", "8"], 1),
    (["examples/watch/train.py", "--fault", "spike", "--at", "12", "--steps", "14"], 0),
    *((["examples/watch/silent.py", "--bug", bug, *extra], 1) for bug, extra in [
        ("no_zero_grad", ["--epochs", "4"]), ("head_left_out", []), ("plain_list", []), ("zero_between", []),
        ("softmax", []), ("broadcast", []), ("eval", []), ("scheduler", []), ("clip_scaled", []), ("clip_value", []),
        ("reinit", []), ("constant", [])]),
]


# diverge (issue 47), run once a session for this file and others (tests/shared_runs.py): a hook
# registered after compiling, located with its line and cause (the README's example); a float16
# run that watch stops (its stops; test_diverge_stops.py's).
SHARED_RUNS = ["diverge-hook-after-compile", "diverge-float16-stop"]


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    """Each run's document, produced once for the module."""
    from typer.testing import CliRunner

    from gradcli.cli import app

    runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1"})
    produced = []
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        for table, args, status in RUNS:
            result = runner.invoke(app, [*args, "--json"], catch_exceptions=False)
            assert result.exit_code == status, (args, result.stdout, result.stderr)
            produced.append((table, "gradcli " + " ".join(args) + " --json", json.loads(result.stdout)))
        for args, status in WATCH_RUNS:  # watch writes its document to --json PATH: stdout is the script's
            # Outside the checkout: a file written into tests/ could be copied by test_wheel's clone
            # while another xdist worker runs it, or collide with this fixture run by another worker.
            path = tmp_path_factory.mktemp("watch") / "watch.json"
            result = runner.invoke(app, ["watch", "-q", "--json", str(path), *args], catch_exceptions=False)
            assert result.exit_code == status, (args, result.stderr)
            produced.append(("watch", "gradcli watch --json PATH " + " ".join(args), json.loads(path.read_text())))
    for name in SHARED_RUNS:
        run = shared_json_run(name, tmp_path_factory)
        assert run["exit_code"] == 1, (name, run["stdout"], run["stderr"])
        produced.append(("diverge", "gradcli " + " ".join(SHARED[name]).replace("{json}", "PATH"), run["document"]))
    return produced


@pytest.mark.parametrize("index", range(len(RUNS) + len(WATCH_RUNS) + len(SHARED_RUNS)),
                         ids=[" ".join(r[1][:2]) for r in RUNS] + [f"watch {r[0][0].split('/')[-1]} {r[0][2]}" for r in WATCH_RUNS]
                         + SHARED_RUNS)
def test_every_produced_key_is_documented_with_its_type(documents, index):
    table, origin, document = documents[index]
    checker = Checker(read_tables())
    checker.document(document, table, origin)
    assert not checker.problems, "\n".join(checker.problems)


def test_every_documented_key_is_produced_by_some_run(documents):
    checker = Checker(read_tables())
    for table, origin, document in documents:
        checker.document(document, table, origin)
    assert not checker.unused(), "\n".join(checker.unused())


def test_every_type_named_in_the_tables_is_a_type_or_a_table():
    tables = read_tables()
    assert {"trace", "check", "check all", "check-function", "list", "grads", "compare"} <= set(tables)
    known = {"string", "integer", "number", "boolean", "null", "tensor", "any", "object", *tables}
    for name, rows in tables.items():
        for key, types in rows.items():
            for kind in types:
                while kind.startswith("list of "):
                    kind = kind[len("list of "):].split(" or ")[0]
                assert kind in known, f"table `{name}`, row `{key}`: unknown type `{kind}`"


PAGE = """
<!-- json: doc -->
| key | type | meaning |
| --- | --- | --- |
| `a` | integer | a |
| `b` | object | b |
| `b.*` | list of number or null | by name |
"""


def test_the_checker_names_an_undocumented_key_and_its_table():
    checker = Checker(read_tables(PAGE))
    checker.document({"a": 1, "b": {"x": [1.5, "nan", None]}, "c": 2}, "doc", "gradcli x --json")
    assert checker.problems == [
        "gradcli x --json: the key `c` is not in docs/json.md: add the row `c` to the table `doc`"
    ]


def test_the_checker_names_a_value_of_the_wrong_type():
    checker = Checker(read_tables(PAGE))
    checker.document({"a": "1", "b": {"y": [float("nan")]}}, "doc", "run")
    assert checker.problems == [
        "run: `a` is a string (1), but docs/json.md says integer (row `a` of the table `doc`)",
        "run: `b.y[0]` is a number (nan), but docs/json.md says number or null (row `b.*` of the table `doc`)",
    ]


def test_the_checker_names_a_documented_key_no_run_produced():
    checker = Checker(read_tables(PAGE))
    checker.document({"a": 1}, "doc", "run")
    assert checker.unused() == [
        "docs/json.md documents `b` in the table `doc`, but no run produced it",
        "docs/json.md documents `b.*` in the table `doc`, but no run produced it",
    ]


def test_the_python_apis_documents_match_the_page_too():
    # README: result.to_json() is the --json document. From Python a grads run has no target
    # text, no "found" words and no seed of its own: they are null, which the page did not say.
    import torch
    from torch import nn

    import gradcli

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    produced = [
        ("grads", gradcli.grads(model, torch.randn(5, 3), loss="out.mean()", steps=2).to_json()),
        ("trace", gradcli.trace(model, torch.randn(5, 3), loss="out.mean()").to_json()),
        ("check", gradcli.check("x*sigmoid(x)", ["x=[0.5, 1.0]"]).to_json()),
    ]
    checker = Checker(read_tables())
    for table, text in produced:
        checker.document(json.loads(text), table, f"gradcli.{table}(...).to_json()")
    assert not checker.problems, "\n".join(checker.problems)
