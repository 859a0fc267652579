"""The result protocol every command's result follows (gradcli/outcome.py), as one check that
tests in any area run on their results: tests/project/test_outcome.py runs it on a passing and a
failing case of each result class, and the results whose runs start processes run it in their own
files (ELSEWHERE)."""

from __future__ import annotations

import json

from gradcli.outcome import Outcome, Problem
from gradcli.render.formats import render
from gradcli.render.plain import plain_text
from gradcli.words import problem_sentence

#: The result classes tests/project/test_outcome.py's cases run; a new command's result adds its cases there.
COVERED = {"TraceResult", "CheckResult", "LibraryCheck", "FunctionResult", "DiscoveryResult", "GradsResult",
           "MemoryResult", "CompareResult", "PlotData", "DemoRun", "WatchResult",
           "DistributedResult", "DistributedGrads", "DivergeResult"}


#: Results whose runs start process groups: their passing and failing cases run in their own
#: test file, on the group it shares (seconds each to start), through follows_the_protocol.
ELSEWHERE = {
    "DistributedResult": "tests/distributed/test_distributed.py::test_the_results_follow_the_protocol",
    "DistributedGrads": "tests/distributed/test_distributed.py::test_the_results_follow_the_protocol",
    "DivergeResult": "tests/divergence/test_diverge.py::test_the_results_follow_the_protocol",  # (child processes)
}


def follows_the_protocol(result, passes: bool) -> None:
    """`result` is an Outcome whose ok, problems, notes, document and text agree."""
    assert isinstance(result, Outcome)
    assert COVERED & {b.__name__ for b in type(result).__mro__}
    assert result.ok is passes
    assert result.ok == (not result.problems)
    assert all(isinstance(p, Problem) and isinstance(p.kind, str) for p in result.problems)
    assert all(isinstance(note, str) for note in result.notes)
    sentences = [problem_sentence(p) for p in result.problems]  # every kind has its words
    assert all(sentences)
    document = result.as_dict()
    json.dumps(document, default=str)  # plain data
    assert document["ok"] is result.ok  # every document carries the verdict and its sentences
    assert document["problems"] == sentences
    written = json.loads(plain_text(render(result, "json")))
    assert written["ok"] is result.ok
    text = plain_text(render(result, "text"))
    assert text
    if hasattr(type(result), "_repr_html_"):  # the public API's results: str() is the text format's
        assert str(result) == text
