"""Issue 16, point 9: check-function prints the seed it used (given or not) and shows N-D
inputs with their shape, not flattened; the JSON keeps the values nested with their shape."""

from __future__ import annotations

import json

import torch

from gradcli import words
from paths import ROOT

EXAMPLE = "examples/typed_functions.py"


def test_the_seed_is_printed_when_not_given(cli, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = cli("check-function", f"{EXAMPLE}:SoftmaxCrossEntropy", "--var", "logits=randn(4, 3)",
                 "--var", "target=randint(0, 3, (4,))")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"check-function {EXAMPLE}:SoftmaxCrossEntropy   (order 1, seed 0)"
    # ... and it is the seed used: --seed 0 draws the same logits.
    again = cli("check-function", f"{EXAMPLE}:SoftmaxCrossEntropy", "--var", "logits=randn(4, 3)",
                "--var", "target=randint(0, 3, (4,))", "--seed", "0")
    assert again.stdout == result.stdout
    seeded = cli("check-function", f"{EXAMPLE}:SoftmaxCrossEntropy", "--var", "logits=randn(4, 3)",
                 "--var", "target=randint(0, 3, (4,))", "--seed", "7", "--json")
    assert json.loads(seeded.stdout)["seed"] == 7


def test_a_matrix_input_is_shown_row_by_row_with_its_shape(cli, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = cli("check-function", f"{EXAMPLE}:SoftmaxArgmax", "--var", "x=[[1.0, 2.0, 0.5], [0.1, -1.0, 0.3]]")
    lines = result.stdout.splitlines()
    assert lines[1:4] == ["x = (shape 2x3)", "  [1.0, 2.0, 0.5]", "  [0.1, -1.0, 0.3]"]
    document = json.loads(cli("check-function", f"{EXAMPLE}:SoftmaxArgmax", "--var",
                              "x=[[1.0, 2.0, 0.5], [0.1, -1.0, 0.3]]", "--json").stdout)
    assert document["inputs"]["x"] == [[1.0, 2.0, 0.5], [0.1, -1.0, 0.3]]
    assert document["arguments"][0]["shape"] == [2, 3] and document["arguments"][0]["dtype"] == "float64"


def test_input_values_as_text():
    assert words.input_value(torch.tensor([0.5, -1.0], dtype=torch.float64)) == "[0.5, -1.0]"
    assert words.input_value(torch.tensor([2, 0])) == "[2, 0] (int64)"
    assert words.input_value(torch.tensor([True, False])) == "[True, False] (bool)"
    assert words.input_value(torch.tensor(0.25, dtype=torch.float64)) == "0.25 (scalar tensor)"
    assert words.input_value(torch.zeros(2, 2, 2, dtype=torch.float64)) == \
        "[[[0.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]] (shape 2x2x2)"
    assert words.input_value(torch.arange(100.0)) == "[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, …] (shape 100)"
    assert words.input_value(None) is None and words.input_value(3) == 3
    assert words.input_lines("m", torch.tensor([[1, 2], [3, 4]])) == ["m = (shape 2x2, int64)", "  [1, 2]", "  [3, 4]"]
