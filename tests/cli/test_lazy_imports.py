"""What each command imports: the start-up costs bench/run.py measures, kept from regressing.

`import torch` is ~1.8 s and sympy ~0.5 s more here, so `gradcli --help` must import
neither, and `gradcli trace` must not import sympy (torch's own `broadcast_shapes` does, on
first use: the builder computes broadcast shapes itself). Each case runs in a fresh
interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gradcli.interpret.to_torch import broadcast_shape

PROBE = """
import json, sys
sys.argv = ["gradcli", *json.loads(sys.argv[1])]
from gradcli.cli import app  # main() would os._exit before the report below
try:
    app()
except SystemExit:
    pass
sys.stdout.flush()
print("\\nMODULES " + json.dumps(sorted(m for m in ("torch", "sympy", "numpy", "rich", "mpmath") if m in sys.modules)))
"""


def loaded_after(*args: str) -> list[str]:
    """The heavy modules loaded by the time `gradcli ARGS` has finished, in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(args))],
        capture_output=True, text=True, env={"NO_COLOR": "1", "COLUMNS": "120", "PATH": ""}, check=True,
    )
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("MODULES ")][-1]
    return json.loads(line.removeprefix("MODULES "))


def test_help_imports_neither_torch_nor_sympy_nor_rich():
    assert loaded_after("--help") == []


def test_trace_imports_torch_but_not_sympy():
    loaded = loaded_after("trace", "x*sigmoid(x)", "--var", "x=[0.5, -1.0]")
    assert "torch" in loaded
    assert "sympy" not in loaded and "mpmath" not in loaded


def test_trace_json_imports_neither_sympy_nor_rich():
    loaded = loaded_after("trace", "h = x*x + x; h = h*h + h; h", "--json")
    assert "sympy" not in loaded and "rich" not in loaded


shapes = st.lists(st.lists(st.integers(0, 3), max_size=4).map(tuple), min_size=0, max_size=4)


@settings(max_examples=300, deadline=None)
@given(shapes)
def test_broadcast_shape_matches_torch(given_shapes):
    try:
        expected = tuple(torch.broadcast_shapes(*given_shapes))
    except RuntimeError:
        with pytest.raises(ValueError):
            broadcast_shape(given_shapes)
    else:
        assert broadcast_shape(given_shapes) == expected


def test_broadcast_shape_examples():
    assert broadcast_shape([(3, 1), (1, 4)]) == (3, 4)
    assert broadcast_shape([(), (2, 3)]) == (2, 3)
    assert broadcast_shape([(0,), (1,)]) == (0,)
    assert broadcast_shape([(5, 1, 2), (4, 1)]) == (5, 4, 2)
    with pytest.raises(ValueError):
        broadcast_shape([(2,), (3,)])
