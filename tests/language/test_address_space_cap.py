"""Under an address-space cap (`ulimit -v`, set here as RLIMIT_AS on a child process) gradcli
exits 0 or 2 with a message, never a traceback: torch that cannot load, an endless stdin, the
deep-recursion thread's stack, and values too many to list.

`import torch` alone maps about 3.1 GiB (measured in `test_torch_needs_the_address_space_we_think`,
which is what makes 2 GB a cap torch cannot load under and 4 GB one with little room left)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from paths import ROOT

resource = pytest.importorskip("resource")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced as ulimit -v on Linux")

GB = 2**30
ROOT = str(ROOT)


def _capped(limit: int):
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return set_limit


def _run(limit: int, args: list[str], endless_stdin: bool = False) -> subprocess.CompletedProcess:
    """`python -m gradcli ARGS` under the cap; with an endless stdin when asked."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "120"}
    command = [sys.executable, "-m", "gradcli", *args]
    if not endless_stdin:
        return subprocess.run(command, preexec_fn=_capped(limit), env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)
    process = subprocess.Popen(command, preexec_fn=_capped(limit), env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def feed() -> None:
        chunk = b"x + " * 65536
        try:
            while True:  # until gradcli stops reading and exits, closing the pipe
                process.stdin.write(chunk)
        except (BrokenPipeError, OSError, ValueError):
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    err = process.stderr.read().decode()  # small; stdout is empty for a refused input
    out = process.stdout.read().decode()
    process.wait()
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def test_torch_needs_the_address_space_we_think():
    probe = "import torch; print(open('/proc/self/status').read().split('VmPeak:')[1].split()[0])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    peak = int(done.stdout) * 1024
    assert 2 * GB < peak < 4 * GB  # the caps below mean what this module says they mean


COMMANDS = {
    "check-huge": ["check", "x", "--var", "x=uniform(1e15, 2e15, 10000)"],
    "trace-stdin": ["trace", "-"],
    "trace-large": ["trace", "x.sum()", "--var", "x=arange(5e7)"],
}


@pytest.mark.parametrize("gigabytes", [2, 4, 6])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_under_a_cap_the_commands_exit_0_or_2_with_a_message(name, gigabytes):
    done = _run(gigabytes * GB, COMMANDS[name], endless_stdin=name == "trace-stdin")
    assert done.returncode in (0, 2), done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "can't start new thread" not in done.stderr
    if done.returncode == 2:
        assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) <= 4
    if name == "trace-stdin":  # the size limit is met before torch loads, whatever the cap
        assert done.returncode == 2 and "larger than 8,000,000 bytes" in done.stderr
    elif gigabytes == 2:  # torch cannot load under 2 GB: said so, with the cap
        assert "torch could not be loaded" in done.stderr and "ulimit -v" in done.stderr
    elif name == "trace-large" and gigabytes == 4:  # 5e7 float64 values and their gradient, beside torch
        assert done.returncode == 0 or "ran out of memory" in done.stderr, done.stderr
    else:  # 4 GB leaves room for a smaller stack; 6 GB for the summary of 5e7 values
        assert done.returncode == 0, done.stderr


def test_a_large_leaf_is_summarised_as_torch_computes_it():
    import json

    import torch

    done = _run(6 * GB, ["trace", "x.sum()", "--var", "x=arange(5e7)", "--json"])
    assert done.returncode == 0, done.stderr
    leaf = json.loads(done.stdout)["leaves"][0]
    x = torch.arange(5e7, dtype=torch.float64)
    assert leaf["value"]["numel"] == x.numel() and leaf["value"]["preview"] == x[:6].tolist()
    assert (leaf["value"]["min"], leaf["value"]["max"]) == (float(x.min()), float(x.max()))
    assert leaf["value"]["mean"] == pytest.approx(float(x.mean()), rel=1e-12)
    assert leaf["grad"]["min"] == leaf["grad"]["max"] == 1.0  # d sum / dx


DEEP = '''
import sys
from gradcli.language.parser import parse
from gradcli.errors import LimitError
sys.setrecursionlimit(1000)
try:
    parse("+".join(["x"] * int(sys.argv[1])))
    print("parsed")
except LimitError as err:
    print("limit:", err.render())
'''


def _vm_size() -> int:
    """Address space a bare `python -c 'import gradcli.language.parser'` maps."""
    probe = ("import gradcli.language.parser; "
             "print(open('/proc/self/status').read().split('VmPeak:')[1].split()[0])")
    env = {**os.environ, "PYTHONPATH": ROOT}
    return int(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True).stdout) * 1024


@pytest.mark.parametrize(("room", "depth", "expected"), [
    (300 * 2**20, 20_000, "parsed"),  # no room for 512 MB: a 128 MB stack, the whole depth
    (20 * 2**20, 2_000, "parsed"),  # only an 8 MB stack: a shallow input still parses
    (20 * 2**20, 20_000, "limit: error: the input is nested deeper than a 8 MB stack holds"),
])
def test_the_deep_thread_takes_a_smaller_stack_and_says_when_too_deep(room, depth, expected):
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", DEEP, str(depth)], preexec_fn=_capped(_vm_size() + room),
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(expected), done.stdout
