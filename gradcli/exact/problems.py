"""A comparison of a derivative against the exact one, as problems: how `check` and `plot`
report a derivative autograd gets wrong (one record per wrong range, points left unarbitrated,
or that it differs), and how those problems read."""

from __future__ import annotations

from .. import words
from ..outcome import Problem, sentence
from .compare import Comparison


def comparison_problems(c: Comparison) -> list[Problem]:
    """A comparison's problems: each wrong range, points left unarbitrated, or (neither) that
    the candidate differs; none when it agreed. `plot` reports its curves the same way."""
    if c.ok:
        return []
    found = [Problem("wrong-range", c.name, {"candidate": c.candidate, "got": r["got"], "exact": r["exact"],
                                            "where": r["where"], "points": r["points"]})
             for r in c.wrong_ranges]
    if c.not_arbitrated:
        found.append(Problem("sampled", c.name, {"arbitrated": c.arbitrated, "disagreeing": c.disagreeing}))
    if not c.wrong_ranges and not c.not_arbitrated:
        found.append(Problem("differs", c.name, {"candidate": c.candidate}))
    return found


@sentence("wrong-range")
def _wrong_range(p: Problem) -> str:
    return words.wrong_range_problem(words.Fields(name=p.subject, candidate=p.detail["candidate"]), p.detail)


@sentence("sampled")
def _sampled(p: Problem) -> str:
    return words.sampled_problem(words.Fields(name=p.subject, **p.detail))


@sentence("differs")
def _differs(p: Problem) -> str:
    return f"{words.candidate_name(p.detail['candidate'])} differs from the exact {words.derivative_label(p.subject)}"
