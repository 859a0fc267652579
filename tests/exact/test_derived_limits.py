"""Issue 18, section 2: limits on the work an input expands into, checked before the work.

Reads are capped (a device or a huge file is refused without being read whole), library
entries are counted as the interpreters would build them, point counts are multiplied by
the variables that hold them, and a symbolic step over its budget is stopped.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from gradcli import limits


def refused(result, message: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


# -- capped reads ---------------------------------------------------------------------------------
@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_an_expression_file_that_is_a_device_is_refused_unread(cli, tmp_path):
    refused(cli("trace", "@/dev/zero"), "cannot read the expression file '/dev/zero': it is not a regular file")
    (tmp_path / "link").symlink_to("/dev/zero")
    refused(cli("trace", f"@{tmp_path / 'link'}"), "it is not a regular file")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_library_file_that_links_to_a_device_is_refused(cli, tmp_path):
    (tmp_path / "zero.toml").symlink_to("/dev/zero")
    refused(cli("list", "--library", str(tmp_path)), f"{tmp_path / 'zero.toml'}: cannot be read (it is not a regular file)")


def test_an_expression_file_past_the_cap_is_refused(cli, tmp_path):
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (limits.MAX_FILE_BYTES + 1))
    refused(cli("trace", f"@{big}"), f"is larger than {limits.MAX_FILE_BYTES:,} bytes")


def test_stdin_past_the_cap_is_refused(cli):
    refused(cli("trace", "-", input="x" * (limits.MAX_FILE_BYTES + 1)),
            f"the expression from stdin is larger than {limits.MAX_FILE_BYTES:,} bytes")


def test_a_file_at_the_cap_is_read(cli, tmp_path):
    text = "x" + " " * (limits.MAX_FILE_BYTES - 1)  # spaces pass the byte cap, then the text is parsed
    (tmp_path / "edge.txt").write_text(text)
    result = cli("trace", f"@{tmp_path / 'edge.txt'}")
    refused(result, f"the expression is {limits.MAX_FILE_BYTES:,} characters long; the limit is {limits.MAX_SOURCE_CHARS:,}")


def test_a_pipe_is_read_with_the_cap(cli, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as stream:
            stream.write("(x * 3).sum()")

    writer = threading.Thread(target=write)
    writer.start()
    result = cli("trace", f"@{fifo}", "--var", "x=[1.0, 2.0]")
    writer.join()
    assert result.exit_code == 0 and "x.grad: [3.0, 3.0]" in result.stdout


# -- library entries counted expanded ----------------------------------------------------------------
def doubling_library(folder: Path, levels: int) -> None:
    entries = ['[f0]\nsignature = "f0(x)"\nbody = "x + x"\ndoc = "d"\nsource = "s"\n']
    for i in range(1, levels + 1):
        entries.append(f'[f{i}]\nsignature = "f{i}(x)"\nbody = "f{i - 1}(x) + f{i - 1}(x)"\ndoc = "d"\nsource = "s"\n')
    (folder / "doubling.toml").write_text("\n".join(entries))


def test_entries_that_double_each_other_are_counted_expanded(cli, tmp_path):
    doubling_library(tmp_path, 40)
    # f_i has 5 + 2 * size(f_{i-1}) nodes, f0 has 3: f40 is 8 * 2**40 - 5, the call adds 2
    refused(cli("trace", "f40(x)", "--library", str(tmp_path)),
            f"with its library calls inlined the expression has {8 * 2**40 - 5 + 2:,} nodes; the limit is {limits.MAX_AST_NODES:,}")
    refused(cli("check", "f17(x)", "--library", str(tmp_path)),
            f"the expression has {8 * 2**17 - 5 + 2:,} nodes")


def test_entries_within_the_expanded_limit_run(cli, tmp_path):
    doubling_library(tmp_path, 10)
    result = cli("trace", "f10(x)", "--var", "x=1.0", "--library", str(tmp_path))
    assert result.exit_code == 0 and "x.grad: 2048.0" in result.stdout


def test_expanded_size_counts_each_call_and_shares_bound_names():
    from gradcli.language.expansion import expanded_nodes
    from gradcli.pipeline import parse  # knows the library functions
    from gradcli.language.library import library_folders, load_library

    library = load_library(library_folders(()))
    assert expanded_nodes(parse("x + 1"), library.functions) == 3
    one = expanded_nodes(parse("silu(x)"), library.functions)  # body x * sigmoid(x): 4 nodes
    assert one == 2 + 4
    assert expanded_nodes(parse("silu(x) + silu(x)"), library.functions) == 1 + 2 * one
    assert expanded_nodes(parse("h = silu(x); h + h"), library.functions) == one + 3


# -- points times variables ----------------------------------------------------------------------------
def test_points_are_counted_for_every_variable_with_the_special_points(cli):
    refused(cli("check", "x*y*z", "--points", "20000000"),
            "20,000,011 points for each of 3 variables make 60,000,033 values; the limit is 50,000,000 in all")


def test_values_times_nodes_are_bounded_before_the_graph_is_built(cli):
    # 40,000,000 values through sin(cos(x)).exp().sum() (5 nodes) is at the limit; one op more is past it
    refused(cli("trace", "sin(cos(x)).exp().sum().abs()", "--var", "x=zeros(40000000)"),
            f"40,000,000 values through 6 nodes is 240,000,000 element-operations; the limit is {limits.MAX_WORK:,}")
    refused(cli("check", "sin(x*y)*y", "--points", "20000000"),
            f"40,000,022 values through 6 nodes is 240,000,132 element-operations; the limit is {limits.MAX_WORK:,}")


def test_points_at_the_per_variable_limit_count_the_special_points(cli):
    refused(cli("check", "x", "--points", str(limits.MAX_ELEMENTS - 5)), "50,000,006 points per variable")


def test_broadcast_variables_are_counted_before_they_are_copied(cli):
    refused(cli("check", "x*y", "--var", "x=zeros(50000,1)", "--var", "y=zeros(1,50000)"),
            "2,500,000,000 points per variable; the limit is 50,000,000")


# -- a symbolic step over its budget stops -------------------------------------------------------------
def test_a_timed_out_symbolic_step_stops_running():
    from gradcli.exact.symbolic import SymbolicTimeout, within

    steps = [0]

    def endless() -> None:
        while True:
            steps[0] += 1

    with pytest.raises(SymbolicTimeout, match="longer than 0.1 s"):
        within(0.1, endless)
    seen = steps[0]
    time.sleep(0.2)
    assert steps[0] == seen, "the symbolic work went on after its budget"
    assert not [t for t in threading.enumerate() if t.name in ("gradcli-sympy", "gradcli-deep")]


def test_a_symbolic_step_within_budget_returns_its_value():
    from gradcli.exact.symbolic import within

    assert within(5.0, sum, [1, 2, 3]) == 6


# -- symbolic work at order 2 --------------------------------------------------------------------------
def test_exact_second_derivatives_past_the_cap_go_to_gradgradcheck(cli):
    import json

    from gradcli.verify.expression.exact_mode import EXACT_SECOND_MAX_ENTRIES

    result = cli("check", "softmax(x, dim=0)", "--var", "x=linspace(-1, 1, 17)", "--order", "2", "--json")
    assert result.exit_code == 0, result.stdout
    document = json.loads(result.stdout)
    assert document["mode"] == "exact" and document["second_derivatives"] == []
    assert f"the 17 elements have 289 second derivatives, more than the {EXACT_SECOND_MAX_ENTRIES} compared exactly" in " ".join(document["notes"])
    assert document["gradgradcheck"]["ok"] is True and len(document["variables"]) == 1


def test_exact_second_derivatives_within_the_cap_are_compared(cli):
    import json

    result = cli("check", "softmax(x, dim=0)", "--var", "x=[1.0, 2.0, 3.0]", "--order", "2", "--json")
    document = json.loads(result.stdout)
    assert result.exit_code == 0 and [c["name"] for c in document["second_derivatives"]] == ["x,x"]
    assert document["second_derivatives"][0]["points"] == 9
