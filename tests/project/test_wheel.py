"""`pip install .` from a clean clone ships every sub-package and the expression library.

A hand-written package list once left a folder out and the wheel imported nothing past it; the
packages are now discovered (setup.py). This builds the wheel the way pip does, from a copy of
the files git would clone (no stale egg-info or build/ folder to paper over a gap), and checks
that every module under gradcli/ and every expressions/*.toml is inside it.

The build runs in the test environment when its setuptools can build wheels by itself (>= 70.1,
or with `wheel` installed): a few seconds. Otherwise pip builds in an isolated environment,
which fetches setuptools from the package index as `pip install .` itself would.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from paths import ROOT

JUNK = ("*.egg-info", "build", "dist", "__pycache__", ".venv", ".ci-venv", ".git", ".pytest_cache", ".hypothesis")


def clean_copy(to: Path, root: Path = ROOT) -> Path:
    """The files a clone of `root` would hold (tracked, or new and not ignored), copied into
    the folder `to` (which may exist already, as pytest's temporary folders do)."""
    listed = None
    if shutil.which("git") and (root / ".git").exists():
        run = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, text=True)
        if run.returncode == 0:
            listed = [name for name in run.stdout.split("\0") if name]
    if listed is None:  # an unpacked sdist or `git archive`: the tree itself, without build leftovers
        shutil.copytree(root, to, ignore=shutil.ignore_patterns(*JUNK), dirs_exist_ok=True)
        return to
    for name in listed:
        source = root / name
        if source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
    return to


def builds_wheels_here() -> bool:
    if importlib.util.find_spec("wheel") is not None:
        return True
    try:
        import setuptools
    except ImportError:
        return False
    major, minor = (int(part) for part in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1)  # setuptools took bdist_wheel in from `wheel` in 70.1


@pytest.fixture(scope="module")
def wheel_and_source(tmp_path_factory):
    source = clean_copy(tmp_path_factory.mktemp("clone"))
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
               "-w", str(out), str(source)]
    if builds_wheels_here():
        command.insert(4, "--no-build-isolation")
    run = subprocess.run(command, capture_output=True, text=True, cwd=source)
    assert run.returncode == 0, run.stdout + run.stderr
    (wheel,) = out.glob("gradcli-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist()), source


def test_a_tree_without_git_is_copied_whole_without_its_build_leftovers(tmp_path):
    # A downloaded archive or an sdist has no .git: the copy is the tree itself, into a folder
    # that already exists (the wheel fixture's mktemp folder; copytree refused it, 3 errors).
    tree = tmp_path / "unpacked"
    for name in ("pyproject.toml", "gradcli/__init__.py", "gradcli/exact/__init__.py", "expressions/basic.toml",
                 "build/lib/gradcli/__init__.py", "gradcli/__pycache__/x.pyc", "gradcli.egg-info/PKG-INFO"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(name)
    copy = tmp_path / "copy"
    copy.mkdir()
    assert clean_copy(copy, tree) == copy
    assert sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()) == [
        "expressions/basic.toml", "gradcli/__init__.py", "gradcli/exact/__init__.py", "pyproject.toml"]


def test_the_wheel_ships_every_module_of_every_sub_package(wheel_and_source):
    names, source = wheel_and_source
    modules = {p.relative_to(source).as_posix() for p in (source / "gradcli").rglob("*.py")}
    packages = {Path(m).parent.as_posix() for m in modules}
    # Folders the layout names, so that a discovery that silently found nothing fails too.
    assert {"gradcli/exact", "gradcli/graph", "gradcli/interpret", "gradcli/verify/function",
            "gradcli/comparison", "gradcli/footprint", "gradcli/distributed", "gradcli/render/training"} <= packages
    assert sorted(modules - names) == []
    assert sorted(p for p in packages if f"{p}/__init__.py" not in names) == []


def test_the_wheel_ships_the_expression_library(wheel_and_source):
    names, source = wheel_and_source
    tomls = {f"gradcli/expressions/{p.name}" for p in (source / "expressions").glob("*.toml")}
    assert tomls and sorted(tomls - names) == []


def test_the_wheel_holds_no_tests_or_stray_top_level_packages(wheel_and_source):
    names, _ = wheel_and_source
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.startswith("gradcli")} == set()


def test_no_committed_file_is_over_a_megabyte():
    # A 2.9 MB wheel of an unrelated tool sat at the root for months; *.whl is ignored now.
    if not (shutil.which("git") and (ROOT / ".git").exists()):
        pytest.skip("not a git checkout")
    run = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, text=True)
    if run.returncode != 0:
        pytest.skip("git cannot list the checkout's files")
    sizes = {name: (ROOT / name).stat().st_size for name in run.stdout.split("\0") if name and (ROOT / name).is_file()}
    assert {name: size for name, size in sizes.items() if size > 1_000_000} == {}
