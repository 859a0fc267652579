"""Guards on what the two benchmarked paths cost, in counts that do not depend on the
machine's speed (bench/ measures the time; these fail when a change makes the work grow).

- `trace --json` on a chain: the Python calls per graph node, as cProfile counts them in the
  thread that builds and walks the graph (gradcli runs the builder in a big-stack thread:
  `run_deep`), the marginal count between a 1,000- and a 3,000-op chain, so that start-up
  and the program's fixed costs fall out. 101 on 2026-12-03 (issue 46; 142 before graph/nodes.py,
  138 before the parser asked each name's validity once, `children` and the inlined size skipped
  leaves by type, the torch builder let a tensor argument through first and read keyword
  kinds only for keywords, and `Labels` read each binding with one getattr).
- `trace --json` on a model (bench/model.py's DeepMLP, the benchmark's model): the Python calls
  per graph node while `gradcli.trace` records the forward, walks the graph and writes the
  JSON, marginal between 20 and 60 blocks. 181 on 2026-12-04 (issue 46; 202 before the module
  table's parameter counts came from one walk of the parameters).
- `check` on many points: the bytes torch's CPU allocator holds at its peak per point, and
  the bytes it allocates per point in all, as torch's profiler reports them
  (`profile_memory=True`), marginal between two sizes, in both of the check's regimes:
  20,000 and 100,000 points (finite differences on every point; 110.99 and 684.96 on
  2026-12-03, issue 46: 126.99 and 814.96 before the float64 points were shared rather than
  copied twice, 798.96 before autograd's ones and zeros were whole-size), and 1,100,000 and
  2,100,000 points (past exact/symbolic.py's CHUNK and gradcheck's 100,000: what grows is the
  whole-size arrays alone, as on the benchmark's 10^7 points; 42.80 and 318.00, against 50.80
  and 432.00 before the leaves shared the points, autograd's ones were one element, `_sampled`
  worked by chunks, bool masks were counted without an int64 copy and find_causes was skipped
  when it had nothing to find). Float64 points are 8 bytes each.

The bounds are today's figures and a few percent: a slip past them is a slip.
"""

from __future__ import annotations

import cProfile
import pstats
import sys

import pytest

import gradcli
from gradcli._deep import run_deep
from paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from programs import chain  # noqa: E402  (bench/'s chain: the benchmark's own program)
from model import DeepMLP  # noqa: E402  (bench/'s model: the benchmark's own)

CALLS_PER_NODE = 101
MODEL_CALLS_PER_NODE = 181
#: (points, points) -> (peak, allocated) bytes per point between them
BYTES_PER_POINT = {
    (20_000, 100_000): (110.99, 684.96),
    (1_100_000, 2_100_000): (42.80, 318.00),
}


def trace_calls(ops: int) -> int:
    """cProfile's count of calls while `gradcli.trace` builds, walks and writes the JSON of an
    `ops`-op chain, in the deep thread the builder runs in."""

    def profiled() -> int:
        profile = cProfile.Profile()
        profile.enable()
        gradcli.trace(chain(ops), "x=0.5").to_json()
        profile.disable()
        return pstats.Stats(profile).total_calls

    return run_deep(profiled)


def test_trace_makes_a_bounded_number_of_python_calls_per_node():
    trace_calls(20)  # caches filled (node types' saved attributes, imports)
    per_node = (trace_calls(3000) - trace_calls(1000)) / 2000
    assert per_node <= CALLS_PER_NODE * 1.03, f"{per_node:.1f} Python calls per node (was {CALLS_PER_NODE})"
    assert per_node > 20, "the premise: the count sees the walk"


def model_calls(blocks: int) -> tuple[int, int]:
    """cProfile's count of calls while `gradcli.trace` records, walks and writes the JSON of a
    `blocks`-block DeepMLP, and the graph's node count (from the document)."""
    import json

    import torch

    def profiled() -> tuple[int, int]:
        torch.manual_seed(0)
        model = DeepMLP(blocks=blocks)
        profile = cProfile.Profile()
        profile.enable()
        text = gradcli.trace(model, x=torch.randn(8, 16), loss="out.pow(2).mean()").to_json()
        profile.disable()
        return pstats.Stats(profile).total_calls, len(json.loads(text)["nodes"])

    return run_deep(profiled)


def test_trace_of_a_model_makes_a_bounded_number_of_python_calls_per_node():
    model_calls(5)  # caches filled
    (calls_a, nodes_a), (calls_b, nodes_b) = model_calls(20), model_calls(60)
    per_node = (calls_b - calls_a) / (nodes_b - nodes_a)
    assert nodes_b - nodes_a == 40 * 9, "the premise: 9 nodes a block (4 of them AccumulateGrad)"
    assert per_node <= MODEL_CALLS_PER_NODE * 1.03, f"{per_node:.1f} Python calls per node (was {MODEL_CALLS_PER_NODE})"
    assert per_node > 20, "the premise: the count sees the walk"


def check_memory(points: int) -> tuple[int, int]:
    """(peak bytes, allocated bytes) of torch's CPU allocator during `gradcli.check` on `points`
    drawn points, from the profiler's events in the order they started."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = gradcli.check("x*sigmoid(x)", points=points, seed=1)
    assert result.ok
    live = peak = allocated = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
        allocated += max(event.self_cpu_memory_usage, 0)
    return peak, allocated


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("sizes", list(BYTES_PER_POINT), ids=["every-point-gradcheck", "chunked"])
def test_check_holds_and_allocates_a_bounded_number_of_bytes_per_point(sizes):
    few, many = sizes
    small, large = check_memory(few), check_memory(many)
    peak, allocated = ((b - a) / (many - few) for a, b in zip(small, large))
    peak_was, allocated_was = BYTES_PER_POINT[sizes]
    assert peak <= peak_was * 1.03, f"{peak:.2f} bytes per point at the peak (was {peak_was})"
    assert allocated <= allocated_was * 1.03, f"{allocated:.2f} bytes allocated per point (was {allocated_was})"
    assert peak >= 8, "the premise: the points themselves (float64) are counted"
