"""Issue 16, point 8: inf and nan never crash `--json`, of any command that has it (trace, check,
check --all, check-function, grads, list; plot and demo print no JSON). Each test makes the
command's document hold a non-finite number, parses it with a parser that refuses NaN and
Infinity (as strict JSON parsers do), and finds the number written as docs/json.md says: the
string "nan", "inf" or "-inf"."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gradcli import check_function
from gradcli.render.trace_json import document_json, lines_json, trace_document, trace_json
from gradcli.render.values import finite_safe
from paths import FIXTURES



def strict(text: str):
    return json.loads(text, parse_constant=lambda constant: pytest.fail(f"{constant} is not JSON"))


def strings(document) -> set[str]:
    """Every string value in a document (nan and inf among them)."""
    found, stack = set(), [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            found.add(item)
    return found


def test_trace(cli):
    result = cli("trace", "log(x).sum()", "--var", "x=[0.0, 1.0]", "--json")
    document = strict(result.stdout)
    assert document["result"]["value"] == "-inf"
    assert document["leaves"][0]["grad"] == ["inf", 1.0]


def test_trace_of_code_with_flow(cli):
    result = cli("trace", "examples/nan_causes.py:Overflow", "--var", "x=ones(4,1)", "--flow", "--json")
    assert result.exit_code == 1
    document = strict(result.stdout)
    assert {"nan", "inf"} & strings(document["flow"])


def test_check(cli):
    result = cli("check", "log(1+exp(x))", "--var", "x=[800.0, 1.0]", "--json")
    assert result.exit_code == 1
    document = strict(result.stdout)
    assert "nan" in strings(document["variables"])  # autograd's gradient at 800


def test_check_all_with_a_library_entry_that_goes_nan(cli, tmp_path):
    (tmp_path / "plain.toml").write_text(
        '[plain_softplus]\nsignature = "plain_softplus(x)"\nbody = "log(1 + exp(x))"\n'
        'doc = "softplus written plainly"\nsource = "a test"\ndomain = [-1000.0, 1000.0]\n'
    )
    result = cli("check", "--all", "--library", str(tmp_path), "--json")
    assert result.exit_code == 1
    document = strict(result.stdout)
    (entry,) = [r for r in document["results"] if r["expression"].startswith("plain_softplus")]
    assert entry["ok"] is False and "nan" in strings(entry)


def test_check_function_with_inf_and_nan_inputs(cli):
    result = cli("check-function", f"{FIXTURES / 'typed_functions.py'}:TanhWithStats",
                 "--var", "x=[inf, nan, 1.0]", "--json")
    assert result.exit_code == 1
    document = strict(result.stdout)
    assert document["inputs"]["x"] == ["inf", "nan", 1.0]
    assert document["first_order"][0]["max_abs_err"] in ("nan", "inf")


def test_check_function_given_numpy_and_torch_non_finite_values():
    # `given` values come from the user's code: a numpy nan used to crash the encoder.
    import importlib.util

    spec = importlib.util.spec_from_file_location("functions_for_json", FIXTURES / "functions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = check_function(module.Swish, given={"x": torch.tensor([1.0, float("inf")]), "beta": np.float64("nan")})
    document = strict(document_json(result.as_dict()))
    assert document["inputs"] == {"x": [1.0, "inf"], "beta": "nan"}


def test_grads(cli):
    result = cli("grads", "examples/grads/faults.py:LogOfSoftmax", "--var", "x=randn(4,8)", "--seed", "0", "--json")
    assert result.exit_code == 1
    document = strict(result.stdout)
    assert document["loss"] == "inf"
    assert document["parameters"][0]["grad_norm"] == "nan"


def test_list_has_no_non_finite_number_to_write(cli, tmp_path):
    # A library domain must be finite (refused otherwise), so list's document never holds one.
    (tmp_path / "wide.toml").write_text(
        '[wide]\nsignature = "wide(x)"\nbody = "2 * x"\ndoc = "d"\nsource = "s"\ndomain = [-inf, inf]\n'
    )
    result = cli("list", "--library", str(tmp_path), "--json")
    assert result.exit_code == 2 and "domain must be [low, high]" in result.stderr
    assert strict(cli("list", "--json").stdout)["functions"]


def test_plot_and_demo_json_are_strict_json_too(cli):
    # Their documents (issue 33) go through the one JSON writer: log(1+exp(x))'s autograd is
    # nan past x = 709.78 (torch's overflow), and the worst error is written as the string "inf".
    plot = cli("plot", "log(1+exp(x))", "--var", "x=linspace(-800,800,2001)", "--json")
    assert plot.exit_code == 1
    document = strict(plot.stdout)
    assert document["curves"][0]["comparison"]["max_abs_err"] == "inf" and document["ok"] is False
    demo = cli("demo", "graph", "--json")
    assert demo.exit_code == 0 and strict(demo.stdout)["ok"] is True


@pytest.mark.parametrize("value, expected", [
    (np.float64("nan"), "nan"), (np.float32("-inf"), "-inf"), (np.float64(2.5), 2.5), (np.int64(3), 3),
    (torch.tensor([1.0, float("nan")]), [1.0, "nan"]), (np.array([[np.inf, 1.0]]), [["inf", 1.0]]),
    ((1.0, float("inf")), [1.0, "inf"]), ({"a": [float("-inf")]}, {"a": ["-inf"]}), ("nan", "nan"), (None, None),
])
def test_finite_safe_takes_numpy_and_torch_values(value, expected):
    assert finite_safe(value) == expected


def test_trace_json_takes_a_numpy_value_in_a_member():
    class Result:  # the few fields trace_json reads, one of them a numpy nan from user code
        expression, root, problems, seed, flow, target, symbolic, ok = "x", "n0", [], None, None, None, None, True
        result = {"shape": [], "dtype": "float64", "value": np.float64("nan")}
        graph = type("Graph", (), {"nodes": [], "root": "n0"})()
        leaves, passes, intermediates, options = [], [], [], {}

    assert strict(lines_json(trace_document(Result())))["result"]["value"] == "nan"


def test_trace_of_code_writes_each_gradient_in_its_leaf_and_its_pass():
    # After the one pass a weight's .grad and the pass's gradient are one tensor, read and
    # written once (render/trace_json.py); both places must still hold torch's own values,
    # a nan among them.
    from gradcli import trace

    torch.manual_seed(0)
    model, x = torch.nn.Linear(3, 2), torch.randn(4, 3)
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    document = strict(trace_json(trace(model, x, loss=lambda out: out.pow(2).sum())))
    model.zero_grad()
    model(x).pow(2).sum().backward()
    (written,) = document["passes"]
    for leaf in document["leaves"]:
        if leaf["name"] in ("weight", "bias"):
            expected = finite_safe(getattr(model, leaf["name"]).grad.tolist())
            assert leaf["grad"] == written["grads"][leaf["name"]] == expected
    assert "nan" in strings(written["grads"]["weight"])
