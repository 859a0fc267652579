"""cli/output.py: lines that fit are printed without rich's word wrapping, and the text is
the same as rich's ordinary print gives, byte for byte, plain or in colour."""

from __future__ import annotations

import io
import random
import subprocess
import sys

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gradcli.cli import output
from gradcli.render.contract import Line

WORDS = ["x", "grad", "SumBackward0", "→", "漢字", "nan", "0.25", "", "  ", "◀ ORIGIN", "a" * 30]


def console(width: int, color: bool) -> Console:
    return Console(file=io.StringIO(), width=width, force_terminal=color, no_color=not color, highlight=False,
                   soft_wrap=False, emoji=False, color_system="standard" if color else None)


def ordinary(lines: list[Line], target: Console) -> None:
    """Every line through rich's word wrapping, as write() printed them before."""
    for line in lines:
        target.print(line.item, style=line.style, soft_wrap=line.soft_wrap, markup=False,
                     **({"overflow": "crop", "no_wrap": True} if line.crop else {}))


def random_line(rng: random.Random, width: int) -> Line:
    words = [rng.choice(WORDS) for _ in range(rng.randint(0, 2 * width // 5 + 2))]
    text = " ".join(words)
    if rng.random() < 0.1:
        text += "\tafter a tab"
    if rng.random() < 0.1:
        text += "\nsecond line"
    if rng.random() < 0.3:
        text = text[: rng.randint(0, width + 2)]  # at and around the width
    kind = rng.random()
    if kind < 0.25:
        item = text  # plain text
    else:
        item = Text(text, style=rng.choice(["", "bold red", "green"]),
                    justify=rng.choice([None, None, None, "default", "left", "center", "right", "full"]),
                    end=rng.choice(["\n", "\n", "\n", ""]))
        if text and rng.random() < 0.5:
            start = rng.randrange(len(text))
            item.stylize("yellow", start, start + rng.randint(1, 8))
    return Line(item, style=rng.choice([None, None, "dim", "bold"]), soft_wrap=rng.random() < 0.2,
                crop=rng.random() < 0.2)


@pytest.mark.parametrize("color", [False, True])
def test_write_prints_what_rich_prints(color):
    rng = random.Random(7 if color else 8)
    fitted = 0
    for _ in range(300):
        width = rng.choice([10, 20, 40, 100])
        lines = [random_line(rng, width) for _ in range(rng.randint(1, 6))]
        if rng.random() < 0.1:
            table = Table("a", "b")
            table.add_row("1", "two words")
            lines.append(Line(table))
        fitted += sum(output._fits(line.item, width) for line in lines)
        ours, theirs = console(width, color), console(width, color)
        output.write(lines, ours)
        ordinary(lines, theirs)
        assert ours.file.getvalue() == theirs.file.getvalue(), lines
    assert fitted > 200  # the soft-wrap path was taken often, not only rich's own


def test_only_single_lines_of_plain_layout_that_fit_skip_the_wrapping():
    assert output._fits("a" * 20, 20) and output._fits(Text("a" * 20, style="red"), 20)
    assert output._fits("漢" * 10, 20) and not output._fits("漢" * 11, 20)  # two cells each
    assert not output._fits("a" * 21, 20)
    assert not output._fits("a\tb", 20) and not output._fits("a\nb", 20)
    assert not output._fits(Text("a", justify="left"), 20) and not output._fits(Text("a", end=""), 20)
    assert not output._fits(Table("a"), 20)


@pytest.mark.parametrize(("args", "status"), [
    (["trace", "x.pow(2).sum()", "--var", "x=[1.0, 2.0]"], 0),
    (["trace", "x.pow(2).sum()", "--var", "x=[1.0, 2.0]", "--json"], 0),
    (["trace", "sqrt(x).sum()", "--var", "x=[0.0, 1.0]", "--flow"], 1),
], ids=["text, agreed", "json, agreed", "text, a problem found"])
def test_a_reader_that_leaves_does_not_change_the_exit_status(args, status):
    # `gradcli ... | head` or `| grep -q`: the pipe closes before the report is written. rich
    # (and click) exit 1 then, which here means "a wrong gradient"; the status stays the verdict's.
    run = subprocess.Popen([sys.executable, "-m", "gradcli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    run.stdout.close()  # the reader leaves before a line is written
    stderr = run.stderr.read().decode()
    assert run.wait() == status, stderr
    assert stderr == ""
