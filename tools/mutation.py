"""Mutation testing of the verdict code, one package at a time (docs/mutation.md).

mutmut reads one [tool.mutmut] table from the pyproject.toml of the folder it runs in and
writes its mutants/ there, so each package runs in its own scratch copy of the checkout, its
table made from the common [tool.mutmut] settings plus the package's own modules and test
files ([tool.gradcli-mutation.<package>] in pyproject.toml). Not part of CI: it takes hours
on two cores.

    python tools/mutation.py fd                # run one package, print its score
    python tools/mutation.py fd --results      # the surviving mutants' names of the last run
    python tools/mutation.py fd --recheck      # the survivors again, against the tests as they are now
    python tools/mutation.py grads --sample 5  # one mutant in five (numbers ending in 0 or 5): a
                                               # first score where the whole run takes too long
    python tools/mutation.py targets --functions _load as_loss   # only these functions' mutants
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Seconds a rechecked mutant's tests may take before it counts as a hang (mutmut's own runs time out too).
RECHECK_TIMEOUT = 900
COPIED = ("gradcli", "tests", "examples", "expressions", "docs", "setup.py", "README.md")


def _toml(value: object) -> str:
    return json.dumps(value)  # strings, booleans, numbers and lists of strings read the same in TOML


def prepare(package: str, settings: dict, work: Path) -> None:
    """A copy of the checkout in `work` whose [tool.mutmut] is this package's, without the
    last run's mutants/: a run stopped while mutmut generated them left an empty module
    there, which the next run took as unchanged (every test then failed to import it)."""
    work.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work / "mutants", ignore_errors=True)
    for name in COPIED:
        source, target = ROOT / name, work / name
        if target.exists():
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target)
    own = settings["tool"]["gradcli-mutation"][package]
    table = dict(settings["tool"]["mutmut"])
    table["only_mutate"] = own["mutate"]
    table["pytest_add_cli_args_test_selection"] = own["tests"]
    lines = ["[tool.mutmut]", *(f"{key} = {_toml(value)}" for key, value in table.items()),
             "", "[tool.pytest.ini_options]", 'markers = ["slow: long runs"]', "addopts = \"-m 'not slow'\"",
             'pythonpath = ["tests"]']  # the area folders import the helpers in tests/ (pyproject's own)
    (work / "pyproject.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def score(work: Path) -> dict[str, int]:
    """Counts per outcome from mutmut's own CI/CD summary."""
    subprocess.run([sys.executable, "-m", "mutmut", "export-cicd-stats"], cwd=work, check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads((work / "mutants" / "mutmut-cicd-stats.json").read_text(encoding="utf-8"))


def survivors(work: Path, untested: bool = False) -> list[str]:
    """The mutants the last run left alive; with `untested`, those no test of the selection
    reached too (a test file added to the selection since may reach them)."""
    shown = subprocess.run([sys.executable, "-m", "mutmut", "results"], cwd=work, capture_output=True, text=True)
    ends = ("survived", "no tests") if untested else ("survived",)
    return [line.split(":")[0].strip() for line in shown.stdout.splitlines() if line.strip().endswith(ends)]


def recheck(package: str, settings: dict, work: Path, only: str | None = None,
            pattern: str | None = None, also: list[str] | None = None) -> dict[str, list[str]]:
    """Each survivor (and untested mutant) of the last run under the package's current test
    files and unmutated modules (copied in fresh), switched on by mutmut's own
    MUTANT_UNDER_TEST: tests written since the run are counted without generating the mutants
    again; refused when a mutated module changed since. `only` narrows the tests
    (pytest -k), `pattern` the survivors (a substring of their names), for time; `also` adds
    test files left out of the package's selection (slow ones, for the few mutants they reach)."""
    own = settings["tool"]["gradcli-mutation"][package]
    changed = [m for m in own["mutate"] if (ROOT / m).read_bytes() != (work / m).read_bytes()]
    if changed:
        raise SystemExit(f"{', '.join(changed)} changed since the run: its mutants are of the old source; "
                         f"run `tools/mutation.py {package}` again")
    tests = list(own["tests"]) + list(also or [])
    if only:
        tests += ["-k", only]
    mutants = work / "mutants"
    shutil.rmtree(mutants / "tests")
    shutil.copytree(ROOT / "tests", mutants / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    # The modules not mutated as they are now too: a fix elsewhere since the run (and its test)
    # would otherwise fail every mutant, counted as caught.
    for source in (ROOT / "gradcli").rglob("*.py"):
        name = source.relative_to(ROOT).as_posix()
        if name not in own["mutate"]:
            (mutants / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, mutants / name)
    outcome: dict[str, list[str]] = {"killed": [], "survived": []}
    for name in [n for n in survivors(work, untested=True) if pattern is None or pattern in n]:
        env = {**os.environ, "MUTANT_UNDER_TEST": name, "PYTHONPATH": str(mutants), "OMP_NUM_THREADS": "1"}
        try:
            killed = subprocess.run(["nice", "-n", "10", sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                     "-m", "not slow", *tests], cwd=mutants, env=env, capture_output=True, text=True,
                                    timeout=RECHECK_TIMEOUT).returncode == 1
        except subprocess.TimeoutExpired:
            killed = True  # a hang is noticed, as mutmut counts its own timeouts
        outcome["killed" if killed else "survived"].append(name)
        print(f"{name}: {'killed' if killed else 'survived'}", flush=True)
    return outcome


def main() -> int:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = settings["tool"]["gradcli-mutation"]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", choices=sorted(packages))
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "gradcli-mutation")
    parser.add_argument("--max-children", type=int, default=1)
    parser.add_argument("--results", action="store_true", help="list the last run's survivors, run nothing")
    parser.add_argument("--recheck", action="store_true", help="run the last run's survivors against the current tests")
    parser.add_argument("-k", dest="only", help="with --recheck: only the tests pytest -k selects")
    parser.add_argument("--mutants", help="with --recheck: only the survivors whose names contain this")
    parser.add_argument("--also", nargs="+", metavar="TESTFILE",
                        help="with --recheck: test files to run besides the package's selection")
    parser.add_argument("--sample", type=int, choices=(1, 5, 10), default=1,
                        help="run one mutant in N, by the last digits of its number (5: 0 and 5; 10: 0)")
    parser.add_argument("--functions", nargs="+", metavar="NAME",
                        help="run only the mutants of these functions or methods (after a fix to them, for time)")
    args = parser.parse_args()
    work = args.work / args.package
    if args.results:
        return subprocess.run([sys.executable, "-m", "mutmut", "results"], cwd=work).returncode
    if args.recheck:
        outcome = recheck(args.package, settings, work, args.only, args.mutants, args.also)
        print(json.dumps({k: len(v) for k, v in outcome.items()}))
        return 0
    prepare(args.package, settings, work)
    # mutmut puts its mutants/ first itself. One intra-op thread: its timeout is CPU seconds, and
    # torch's second thread spinning on a loaded machine made killed mutants of memory "timeout".
    env = {**os.environ, "PYTHONPATH": "", "OMP_NUM_THREADS": "1"}
    patterns = {1: ["*__mutmut_*"], 5: ["*__mutmut_*0", "*__mutmut_*5"], 10: ["*__mutmut_*0"]}[args.sample]
    if args.functions:  # mutmut names a function's mutants `...x_NAME__mutmut_N`, a method's `...ǁClassǁNAME__mutmut_N`
        patterns = [f"*{mark}{name}{p[1:]}" for name in args.functions for mark in ("x_", "ǁ") for p in patterns]
    elif args.sample == 1:
        patterns = []  # every mutant
    subprocess.run(["nice", "-n", "10", sys.executable, "-m", "mutmut", "run", "--max-children",
                    str(args.max_children), *patterns], cwd=work, env=env)
    print(json.dumps(score(work), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
