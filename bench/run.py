"""gradcli side by side with what a user would run instead: time and peak memory, as ratios.

    python bench/run.py            # 7 repetitions of everything (about 10 minutes here)
    python bench/run.py --quick    # 3 repetitions (a few minutes)
    python bench/run.py --only help,trace --reps 5
    python bench/run.py --write    # also put the table into bench/README.md

Every command runs as its own child process, so start-up (imports) is part of what is
measured, as a user feels it. One repetition runs every command once, in a shuffled order
(different in each repetition), so that drift in the machine's load falls on both sides of a
ratio alike; the table gives medians over the repetitions. Time is wall-clock
(`time.perf_counter` around spawn-to-exit); peak memory is the child's maximum resident set
size as the kernel reports it to `os.wait4` (the same number as `/usr/bin/time -v`'s
"Maximum resident set size"), for that one child alone. Every run's exit status is checked
against the one its command declares (1 where both sides must find a wrong Function), and any
other stops the benchmark: a fast wrong answer is not a result.

Run it with the interpreter of the environment gradcli is installed in (the `gradcli`
script next to `sys.executable` is used). torchviz is needed for the chain comparison:
`pip install torchviz`.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
sys.path.insert(0, str(HERE))

import programs  # noqa: E402  (bench/programs.py: the chain and DAG program texts)
from model_args import BLOCKS  # noqa: E402
from model_args import GRADCLI_ARGS as MODEL_ARGS  # noqa: E402  (no torch here: see model_args.py)
import real_models  # noqa: E402  (ResNet-18 and GPT-2 command lines, without torch)

PYTHON = sys.executable
BIG_POINTS = 10_000_000
CHAIN_OPS = 20_000
DAG_LEVELS = 40
SMALL_CHAIN_OPS = 120
DEFAULT_REPS, QUICK_REPS = 7, 3
TABLE_START, TABLE_END = "<!-- bench-table -->", "<!-- /bench-table -->"


def gradcli_script(work: Path) -> str:
    """The `gradcli` console script beside this interpreter; else (gradcli importable from a
    source tree on PYTHONPATH, as in an environment that has torchvision and transformers but
    not gradcli installed) one written into `work` as pip writes it."""
    beside = Path(PYTHON).with_name("gradcli")
    if beside.exists():
        return str(beside)
    script = work / "gradcli"
    # guarded, as pip writes it: spawned ranks (--ddp) import the main module again
    script.write_text(f"#!{PYTHON}\nimport sys\nfrom gradcli.cli import main\nif __name__ == \"__main__\":\n    sys.exit(main())\n")
    script.chmod(0o755)
    return str(script)


@dataclass
class Command:
    """One program a user would type, with the exit status it must give."""

    name: str
    argv: list[str]
    shown: str  # how the table names it
    expect: int = 0
    needs: tuple[str, ...] = ()  # packages beyond torch (torchvision...): the row is skipped without them
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    peak_mb: list[float] = field(default_factory=list)

    def median(self, values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")


@dataclass
class Comparison:
    """gradcli against the alternative: median time ratio (and memory ratio where targeted)."""

    key: str
    what: str
    ours: str
    theirs: str
    time_target: float
    memory_target: float | None = None
    # Growth rows: `base`, `theirs` and `ours` are the same command at 1x, 2x and 4x the size;
    # each ratio is the second doubling's cost over twice the first's, (4x - 2x) / 2(2x - 1x):
    # 1 when the cost per node is flat, 2 when it grows with the size (quadratic).
    base: str | None = None

    def names(self) -> list[str]:
        return [n for n in (self.ours, self.theirs, self.base) if n is not None]


def commands(work: Path) -> dict[str, Command]:
    """Every command the comparisons need, each measured once per repetition."""
    gradcli = gradcli_script(work)
    chain = work / "chain20000.txt"
    chain.write_text(programs.chain(CHAIN_OPS))
    dag = work / "dag40.txt"
    dag.write_text(programs.doubling_dag(DAG_LEVELS))
    dag_half = work / "dag20.txt"
    dag_half.write_text(programs.doubling_dag(DAG_LEVELS // 2))
    small = work / "chain120.txt"
    small.write_text(programs.chain(SMALL_CHAIN_OPS))
    listed = [
        Command("torch", [PYTHON, "-c", "import torch"], 'python -c "import torch"'),
        Command("torch_sympy", [PYTHON, "-c", "import torch, sympy"], 'python -c "import torch, sympy"'),
        Command("help", [gradcli, "--help"], "gradcli --help"),
        Command("trace", [gradcli, "trace", "x*sigmoid(x)"], 'gradcli trace "x*sigmoid(x)"'),
        Command("check", [gradcli, "check", "x*sigmoid(x)"], 'gradcli check "x*sigmoid(x)"'),
        Command(
            "check_big", [gradcli, "check", "x*sigmoid(x)", "--points", str(BIG_POINTS)],
            f'gradcli check "x*sigmoid(x)" --points {BIG_POINTS:.0e}',
        ),
        Command(
            "handwritten_big", [PYTHON, str(HERE / "handwritten_check.py"), str(BIG_POINTS)],
            f"bench/handwritten_check.py {BIG_POINTS:.0e} (torch + sympy + gradcheck)",
        ),
        Command(
            "chain_json", [gradcli, "trace", f"@{chain}", "--var", "x=0.5", "--json"],
            f"gradcli trace --json, {CHAIN_OPS:,}-op chain",
        ),
        Command(
            "torchviz", [PYTHON, str(HERE / "torchviz_chain.py"), str(CHAIN_OPS)],
            f"torchviz make_dot(...).source, same {CHAIN_OPS:,}-op chain",
        ),
        Command(
            "dag", [gradcli, "trace", f"@{dag}", "--var", "x=-0.25"],
            f"gradcli trace, {DAG_LEVELS}-level doubling DAG (h = h*h + h)",
        ),
        Command(
            "dag_symbolic", [gradcli, "trace", f"@{dag}", "--var", "x=-0.25", "--symbolic"],
            f"gradcli trace --symbolic, {DAG_LEVELS}-level DAG",
        ),
        Command(
            "dag_half_symbolic", [gradcli, "trace", f"@{dag_half}", "--var", "x=-0.25", "--symbolic"],
            f"gradcli trace --symbolic, {DAG_LEVELS // 2}-level DAG",
        ),
        Command(
            "chain_small", [gradcli, "trace", f"@{small}", "--var", "x=0.5"],
            f"gradcli trace, {SMALL_CHAIN_OPS}-op chain",
        ),
        Command(
            "dag_json", [gradcli, "trace", f"@{dag}", "--var", "x=-0.25", "--json", "--flow"],
            f"gradcli trace --json --flow, {DAG_LEVELS}-level DAG",
        ),
        Command(
            "chain_small_json", [gradcli, "trace", f"@{small}", "--var", "x=0.5", "--json", "--flow"],
            f"gradcli trace --json --flow, {SMALL_CHAIN_OPS}-op chain",
        ),
        Command(
            "model_json", [gradcli, *MODEL_ARGS, "--json"],
            "gradcli trace --json, bench/model.py:DeepMLP (4,956 nodes)",
        ),
        Command(
            "torchviz_model", [PYTHON, str(HERE / "torchviz_model.py")],
            "torchviz make_dot(loss, params=dict(model.named_parameters())).source, same model",
        ),
        Command("model_flow", [gradcli, *MODEL_ARGS, "--flow"], "gradcli trace --flow, same model"),
        Command("plain_model", [PYTHON, str(HERE / "plain_model.py")], "bench/plain_model.py: forward + backward, same model"),
        Command(
            "grads_mlp", [gradcli, "grads", f"{HERE / 'mlp24.py'}:MLP24", "--var", "x=randn(64, 1024)", "--loss", "out.pow(2).mean()"],
            "gradcli grads, 24-layer MLP (width 1024, batch 64, float32)",
        ),
        Command(
            "compare_mlp", [gradcli, "compare", f"{HERE / 'mlp24.py'}:MLP24", "--var", "x=randn(64, 1024)", "--loss",
                            "out.pow(2).mean()", "--amp", "bfloat16"],
            "gradcli compare --amp bfloat16, 24-layer MLP (width 1024, batch 64)",
        ),
        Command(
            "handwritten_compare", [PYTHON, str(HERE / "compare_handwritten.py")],
            "bench/compare_handwritten.py (same model: eager float32 and autocast bfloat16 on copies, print each rel err)",
        ),
        Command(
            "handwritten_grads", [PYTHON, str(HERE / "handwritten_grads.py")],
            "bench/handwritten_grads.py (same model: forward, backward, print each grad norm)",
        ),
        Command(
            "memory_mlp", [gradcli, "memory", f"{HERE / 'mlp24.py'}:MLP24", "--var", "x=randn(64, 1024)", "--loss",
                           "out.pow(2).mean()", "--checkpoint", "0", "--no-create-graph"],
            "gradcli memory --checkpoint 0 --no-create-graph, 24-layer MLP (the measurement itself)",
        ),
        Command(
            "handwritten_memory", [PYTHON, str(HERE / "memory_handwritten.py")],
            "bench/memory_handwritten.py (same model: forward under a saved_tensors_hooks counter, backward)",
        ),
        Command(
            "compare_ddp", [gradcli, "compare", f"{HERE / 'mlp24.py'}:MLP24", "--var", "x=randn(64, 1024)", "--loss",
                            "out.pow(2).mean()", "--ddp", "2"],
            "gradcli compare --ddp 2, 24-layer MLP (2 gloo ranks, batch 64)",
        ),
        Command(
            "ddp_handwritten", [PYTHON, str(HERE / "ddp_handwritten.py")],
            "bench/ddp_handwritten.py (mp.spawn, DDP, one-process reference on rank 0, rel err per parameter)",
        ),
        Command(
            "function", [gradcli, "check-function", str(EXAMPLES / "swish.py") + ":Swish", "--ref", "x*sigmoid(x)",
                         "--order", "2"],
            'gradcli check-function examples/swish.py:Swish --ref "x*sigmoid(x)" --order 2',
        ),
        Command(
            "handwritten_function", [PYTHON, str(HERE / "handwritten_function.py")],
            "bench/handwritten_function.py (gradcheck, gradgradcheck, sympy's 1st and 2nd derivatives)",
        ),
        # examples/custom_ops has a deliberately wrong LeakyReLU: both sides must exit 1.
        Command(
            "function_package", [gradcli, "check-function", str(EXAMPLES / "custom_ops")],
            "gradcli check-function examples/custom_ops", expect=1,
        ),
        Command(
            "handwritten_function_ci", [PYTHON, str(HERE / "handwritten_function_ci.py")],
            "bench/handwritten_function_ci.py (import each module, gradcheck each Function)", expect=1,
        ),
        Command(
            "handwritten_function_bare", [PYTHON, str(HERE / "as_gradcli_exits.py"), str(HERE / "handwritten_function.py")],
            "the same script, collector off and no teardown (bench/as_gradcli_exits.py)",
        ),
        Command(
            "handwritten_function_ci_bare",
            [PYTHON, str(HERE / "as_gradcli_exits.py"), str(HERE / "handwritten_function_ci.py")],
            "the same CI loop, collector off and no teardown (bench/as_gradcli_exits.py)", expect=1,
        ),
    ]
    listed += real_model_commands(gradcli) + scaling_commands(gradcli)
    return {c.name: c for c in listed}


def real_model_commands(gradcli: str) -> list[Command]:
    """torchvision's ResNet-18 and a 2-layer GPT-2 (real_models.py), where installed."""
    vision, gpt = ("torchvision", "torchviz"), ("transformers", "torchviz")
    return [
        Command("resnet_json", [gradcli, "trace", *real_models.RESNET_ARGS, "--json"],
                "gradcli trace --json, torchvision.models:resnet18 (2x3x32x32)", needs=vision),
        Command("torchviz_resnet", [PYTHON, str(HERE / "torchviz_real.py"), "resnet18"],
                "torchviz make_dot(loss, params=...).source, same ResNet-18", needs=vision),
        Command("gpt2_json", [gradcli, "trace", *real_models.GPT2_ARGS, "--json"],
                "gradcli trace --json, 2-layer GPT-2 (GPT2Config, 2x16 tokens)", needs=gpt),
        Command("torchviz_gpt2", [PYTHON, str(HERE / "torchviz_real.py"), "gpt2"],
                "torchviz make_dot(loss, params=...).source, same GPT-2", needs=gpt),
        Command("grads_resnet", [gradcli, "grads", *real_models.RESNET_ARGS],
                "gradcli grads, torchvision.models:resnet18 (2x3x32x32)", needs=("torchvision",)),
        Command("handwritten_grads_resnet", [PYTHON, str(HERE / "handwritten_grads_resnet.py")],
                "bench/handwritten_grads_resnet.py (same model: per parameter norm, max, zero share)",
                needs=("torchvision",)),
    ]


#: The scaling rows' sizes: DeepMLP (bench/model.py) at 1x, 2x and 4x these blocks (~9 nodes each).
SCALES = (BLOCKS // 2, BLOCKS, BLOCKS * 2)


def scaling_commands(gradcli: str) -> list[Command]:
    """trace --json and grads on the same model at 1x, 2x, 4x its depth."""
    listed = []
    for blocks, times in zip(SCALES, (1, 2, 4)):
        depth = ["--init", f"blocks={blocks}"]
        listed += [
            Command(f"trace_{times}x", [gradcli, *MODEL_ARGS, "--json", *depth],
                    f"gradcli trace --json, DeepMLP {blocks} blocks ({times}x)"),
            Command(f"grads_{times}x", [gradcli, "grads", *MODEL_ARGS[1:], *depth],
                    f"gradcli grads, DeepMLP {blocks} blocks ({times}x)"),
        ]
    return listed


COMPARISONS = [
    Comparison("help", "start-up: help", "help", "torch", 0.10),
    Comparison("trace", "start-up: trace", "trace", "torch", 1.25),
    Comparison("check", "start-up: check", "check", "torch_sympy", 1.5),
    Comparison("check_big", "check on 10^7 points", "check_big", "handwritten_big", 1.2, 1.3),  # issue 46 item 7
    Comparison("chain", f"trace --json, {CHAIN_OPS:,}-op chain", "chain_json", "torchviz", 0.9),  # issue 18 section 4
    Comparison("dag", f"{DAG_LEVELS}-level DAG vs {SMALL_CHAIN_OPS}-op chain", "dag", "chain_small", 2.0),
    Comparison("dag_json", "same, --json --flow", "dag_json", "chain_small_json", 2.0),
    Comparison("model_json", "trace --json on a ~5,000-node model", "model_json", "torchviz_model", 0.9),  # issue 46 item 7
    Comparison("model_flow", "trace --flow on it vs forward+backward", "model_flow", "plain_model", 2.0),
    Comparison("grads", "grads, 24-layer MLP", "grads_mlp", "handwritten_grads", 1.2, 1.3),
    # issue 28: the measurement (saved tensors by node, module and line, the peak, what backward
    # frees) against a bare hook counter; bench/memory_inprocess.py times it without start-up.
    Comparison("memory", "memory, 24-layer MLP", "memory_mlp", "handwritten_memory", 1.5),
    Comparison("compare", "compare --amp bfloat16, 24-layer MLP", "compare_mlp", "handwritten_compare", 2.5),  # issue 26
    # Both sides spawn two ranks that import torch; gradcli adds its reference in the parent
    # process, every rank's gradients sent back and compared, and the unused-parameter probe.
    Comparison("compare_ddp", "compare --ddp 2, 24-layer MLP", "compare_ddp", "ddp_handwritten", 2.0),
    # --symbolic imports sympy and writes ~4 formulas a node; linear means doubling the
    # levels (and nodes) at most doubles the time beyond start-up, where 2^levels would not.
    Comparison("dag_symbolic", f"--symbolic vs plain trace, {DAG_LEVELS}-level DAG", "dag_symbolic", "dag", 3.0),
    Comparison("dag_symbolic_linear", f"--symbolic, {DAG_LEVELS} vs {DAG_LEVELS // 2} levels (2x the nodes)",
               "dag_symbolic", "dag_half_symbolic", 2.0),
    # check-function against the script a user writes instead: both sides import torch (and
    # sympy for --ref), which is most of either; gradcli's extra checks (every Jacobian entry at
    # both orders, kinks, the contract audit, jvp and torch.func where the Function has them)
    # run on 14-element inputs, so they should cost a fraction of start-up.
    Comparison("function", "check-function, one Function, order 2", "function", "handwritten_function", 1.25),
    Comparison("function_package", "check-function, a package of 4 Functions", "function_package",
               "handwritten_function_ci", 1.25),
    # The same pairs with the scripts run as gradcli's console script runs itself (no cyclic
    # collector, no interpreter teardown): the ratio of the checks and imports alone, where
    # gradcli's extra checks and typer/rich show; they are allowed half the start-up again.
    Comparison("function_bare", "same Function, script without collector and teardown", "function",
               "handwritten_function_bare", 1.5),
    Comparison("function_package_bare", "same package, loop without collector and teardown", "function_package",
               "handwritten_function_ci_bare", 1.5),
    # Real architectures (issue 29), skipped where torchvision / transformers / torchviz are missing.
    Comparison("resnet_json", "trace --json, ResNet-18", "resnet_json", "torchviz_resnet", 1.0),
    Comparison("gpt2_json", "trace --json, 2-layer GPT-2", "gpt2_json", "torchviz_gpt2", 1.0),
    Comparison("grads_resnet", "grads, ResNet-18", "grads_resnet", "handwritten_grads_resnet", 1.2, 1.3),
    # How the cost grows with depth: the cost per node of going 2x -> 4x over that of 1x -> 2x.
    Comparison("trace_growth", "trace --json, per-node cost 2x->4x over 1x->2x depth", "trace_4x", "trace_2x",
               1.25, 1.25, base="trace_1x"),
    Comparison("grads_growth", "grads, per-node cost 2x->4x over 1x->2x depth", "grads_4x", "grads_2x",
               1.25, 1.25, base="grads_1x"),
]


def run_once(command: Command, env: dict[str, str]) -> None:
    """Spawn, wait with os.wait4 (this child's own rusage), record time, CPU and peak RSS."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(command.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        if child.returncode != command.expect:
            err.seek(0)
            tail = err.read().decode(errors="replace")[-2000:]
            raise SystemExit(
                f"bench: `{' '.join(command.argv)}` exited {child.returncode}, expected {command.expect}\n{tail}"
            )
    # ru_maxrss is in kilobytes on Linux, bytes on macOS.
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024
    command.seconds.append(elapsed)
    command.cpu.append(usage.ru_utime + usage.ru_stime)
    command.peak_mb.append(usage.ru_maxrss / scale)


def compile_gradcli() -> None:
    """Write gradcli's bytecode first, as `pip install` does for an installed package.

    An editable install's modules are compiled on first import and the bytecode cached, but
    with PYTHONDONTWRITEBYTECODE set (it is in the sandbox these figures come from) nothing is
    cached and every gradcli run compiled its ~60 modules from source again (~35 ms CPU of a
    trace), while torch and torchviz, installed by pip, load theirs precompiled.
    """
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("gradcli")  # located, not imported: no torch in this process
    if spec is None or spec.origin is None:
        raise SystemExit("bench: gradcli is not installed in this environment")
    compileall.compile_dir(str(Path(spec.origin).parent), quiet=1)


def measure(selected: list[Command], reps: int, seed: int) -> None:
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1"}
    order = random.Random(seed)
    # One untimed round warms the page cache (torch's shared libraries) and checks that
    # every command works before minutes are spent timing it.
    print(f"warm-up: {len(selected)} commands", file=sys.stderr)
    for command in selected:
        run_once(command, env)
        command.seconds.clear(), command.cpu.clear(), command.peak_mb.clear()
    for rep in range(1, reps + 1):
        batch = selected[:]
        order.shuffle(batch)
        for command in batch:
            run_once(command, env)
        print(f"repetition {rep}/{reps} done", file=sys.stderr)


def table(cmds: dict[str, Command], chosen: list[Comparison], reps: int, load: tuple[float, float]) -> str:
    lines = [
        f"Machine: {os.cpu_count()} CPUs, {platform.machine()}, Python "
        f"{platform.python_version()}; {reps} repetitions, medians; load average "
        f"{load[0]:.2f} before, {load[1]:.2f} after; {time.strftime('%Y-%m-%d %H:%M')}.",
        "",
        "| comparison | gradcli | s | alternative | s | time ratio | target | CPU ratio | peak MB (gradcli / alt.) | memory ratio | met |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    for c in chosen:
        ours, theirs = cmds[c.ours], cmds[c.theirs]
        t_ours, t_theirs = ours.median(ours.seconds), theirs.median(theirs.seconds)
        m_ours, m_theirs = ours.median(ours.peak_mb), theirs.median(theirs.peak_mb)
        ratio, mem_ratio = t_ours / t_theirs, m_ours / m_theirs
        cpu_ratio = ours.median(ours.cpu) / theirs.median(theirs.cpu)
        if c.base is not None:
            base = cmds[c.base]
            ratio, cpu_ratio, mem_ratio = (
                _growth(base.median(values(base)), theirs.median(values(theirs)), ours.median(values(ours)))
                for values in (lambda k: k.seconds, lambda k: k.cpu, lambda k: k.peak_mb)
            )
        met = ratio <= c.time_target and (c.memory_target is None or mem_ratio <= c.memory_target)
        target = f"≤ {c.time_target:g}" + (f" (mem ≤ {c.memory_target:g})" if c.memory_target else "")
        lines.append(
            f"| {c.what} | `{ours.shown}` | {t_ours:.3f} | `{theirs.shown}` | {t_theirs:.3f} | "
            f"**{ratio:.3f}** | {target} | {cpu_ratio:.3f} | {m_ours:.0f} / {m_theirs:.0f} | {mem_ratio:.2f} | "
            f"{'yes' if met else 'NO'} |"
        )
    lines += ["", "Per command (medians; CPU is user+system time of the child):", "",
              "| command | wall s | min s | max s | CPU s | peak MB |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    used = []
    for c in chosen:
        used += [n for n in c.names() if n not in used]
    for name in used:
        cmd = cmds[name]
        lines.append(
            f"| `{cmd.shown}` | {cmd.median(cmd.seconds):.3f} | {min(cmd.seconds):.3f} | "
            f"{max(cmd.seconds):.3f} | {cmd.median(cmd.cpu):.3f} | {cmd.median(cmd.peak_mb):.0f} |"
        )
    return "\n".join(lines)


def _growth(small: float, mid: float, large: float) -> float:
    """(large - mid) / 2(mid - small): the second doubling's cost per node over the first's."""
    return (large - mid) / (2 * (mid - small)) if mid != small else float("nan")


def write_readme(text: str) -> None:
    readme = HERE / "README.md"
    content = readme.read_text(encoding="utf-8")
    start, end = content.index(TABLE_START) + len(TABLE_START), content.index(TABLE_END)
    readme.write_text(content[:start] + "\n" + text + "\n" + content[end:], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_REPS} repetitions instead of {DEFAULT_REPS}")
    parser.add_argument("--reps", type=int, help="repetitions (overrides --quick)")
    parser.add_argument("--only", help="comma-separated comparisons: " + ",".join(c.key for c in COMPARISONS))
    parser.add_argument("--seed", type=int, default=0, help="seed of the run order shuffle")
    parser.add_argument("--write", action="store_true", help="put the table into bench/README.md")
    args = parser.parse_args(argv)
    reps = args.reps or (QUICK_REPS if args.quick else DEFAULT_REPS)
    chosen = list(COMPARISONS)
    if args.only:
        keys = args.only.split(",")
        unknown = set(keys) - {c.key for c in COMPARISONS}
        if unknown:
            parser.error(f"unknown comparison(s): {', '.join(sorted(unknown))}")
        chosen = [c for c in COMPARISONS if c.key in keys]
    with tempfile.TemporaryDirectory(prefix="gradcli-bench-") as work:
        cmds = commands(Path(work))
        skipped = []
        for c in list(chosen):
            missing = real_models.installed(*{p for n in c.names() for p in cmds[n].needs})
            if missing:
                chosen.remove(c)
                skipped.append(f"skipped: {c.what} ({', '.join(sorted(missing))} not installed)")
        for note in skipped:
            print(f"bench: {note}", file=sys.stderr)
        names = []
        for c in chosen:
            names += [n for n in c.names() if n not in names]
        compile_gradcli()
        before = os.getloadavg()[0]
        measure([cmds[n] for n in names], reps, args.seed)
        after = os.getloadavg()[0]
    text = table(cmds, chosen, reps, (before, after)) + "".join(f"\n\n{note}" for note in skipped)
    print(text)
    if args.write:
        write_readme(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
