"""`gradcli watch` from the shell: the script runs as python runs it, the report and exit
status, --json/--log/--plot, and the script's own errors shown as its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from paths import ROOT

EXAMPLE = ROOT / "examples" / "watch" / "train.py"


def gradcli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "gradcli", "watch", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


LOOP = """
import sys, torch
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 6):
    x = torch.randn(4, 3)
    if step == {bad}:
        x[0, 0] = float("nan")
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
"""


def test_the_script_runs_as_python_runs_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LOOP.format(bad=99) + textwrap.dedent("""
        import os
        print("name", __name__)
        print("argv", sys.argv)
        print("path0", os.path.samefile(sys.path[0], os.path.dirname(os.path.abspath(__file__))))
    """))
    done = gradcli("-q", str(script), "--epochs", "3", "-m", "x", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["name __main__", f"argv ['{script}', '--epochs', '3', '-m', 'x']", "path0 True"]
    assert "finished; 5 optimizer step(s) applied, 5 checked, no finding" in done.stderr


def test_a_module_runs_as_python_dash_m_runs_it(tmp_path):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(LOOP.format(bad=3) + "\nprint('argv', sys.argv[1:])\n")
    done = gradcli("-q", "-m", "mypkg.train", "--lr", "1", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "stopped at step 3 of SGD" in done.stderr
    assert done.stdout == ""  # stopped inside the loop: the script's print never ran


def test_a_stop_exits_1_with_its_json_and_the_scripts_finally_runs(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("try:\n" + textwrap.indent(LOOP.format(bad=4), "    ")
                      + "finally:\n    open('finally.txt', 'w').write('ran')\n")
    out = tmp_path / "result.json"
    done = gradcli("-q", "--json", str(out), str(script), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert (tmp_path / "finally.txt").read_text() == "ran"
    document = json.loads(out.read_text())
    assert document["ok"] is False and document["steps"] == 3
    stop = document["stop"]
    assert {"step", "kind", "parameters", "module", "origin", "cause"} <= set(stop)
    assert stop["step"] == 4 and stop["parameters"] == ["weight", "bias"]
    assert set(stop["origin"]) == {"phase", "node", "module", "file", "line"}
    call_line = 1 + script.read_text().splitlines().index("        model(x).pow(2).mean().backward()")
    assert stop["origin"]["phase"] == "input" and stop["origin"]["line"] == call_line
    assert stop["cause"]["kind"] == "nonfinite_input"
    assert document["findings"] == []


def test_findings_exit_1_and_the_log_has_a_line_per_checked_step(cli, tmp_path):
    # in this process (typer's CliRunner): the statuses and files, not how the script is started
    log = tmp_path / "steps.jsonl"
    done = cli("watch", "-q", "--every", "2", "--log", str(log), str(EXAMPLE), "--fault", "unused", "--steps", "8")
    assert done.exit_code == 1, done.stderr
    assert "no gradient" in done.stderr and "spare.weight, spare.bias" in done.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4, 6, 8]
    assert set(records[0]) == {"step", "optimizer", "loss", "grad_norm", "loss_z", "grad_z", "layers",
                               "adam_ratios"}
    assert set(records[0]["layers"]) == {"fc1", "proj", "head"}


def test_the_scripts_own_exception_is_its_traceback_and_exit_2(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("def load():\n    return {}['data']\n\nload()\n")
    done = gradcli(str(script))
    assert done.returncode == 2
    assert "KeyError: 'data'" in done.stderr and f'File "{script}", line 4' in done.stderr
    assert "gradcli/" not in done.stderr.replace(str(ROOT / "tests"), "")  # no frame of gradcli's own


def test_no_script_or_a_missing_one_is_exit_2(cli):
    assert cli("watch").exit_code == 2
    done = cli("watch", "no_such_train.py")
    assert done.exit_code == 2 and "can't open file 'no_such_train.py'" in done.stderr
    done = cli("watch", "-m", "no_such_module_here")
    assert done.exit_code == 2 and "no module named 'no_such_module_here'" in done.stderr


def test_plot_draws_the_log(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the steps drawn from are kept
    picture = tmp_path / "run.png"
    done = cli("watch", "-q", "--plot", str(picture), str(EXAMPLE), "--fault", "spike", "--at", "12", "--steps", "16")
    assert done.exit_code == 0, done.stderr  # the spike is a warning (kinds.py): reported, the run not failed
    assert "warnings (worth a look" in done.stderr and "loss spike" in done.stderr
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(scratch.glob("gradcli-*")), "the steps' folder is left behind"
