"""The suite's layout: every test file sits in an area folder named after the package it tests.

tests/<area>/ mirrors gradcli/<area>/ (tests/verify/function/ tests gradcli/verify/function/);
the few folders that test no one package are named in OTHER_AREAS with what they hold. The
helpers the areas share (conftest.py, machine.py, models.py, paths.py, ...) sit in tests/
itself, and a test file's name is unique across folders (pytest imports them by basename:
pyproject's `pythonpath = ["tests"]`, no __init__.py). docs/ARCHITECTURE.md's "The tests"
names every area, so a reader finds where a test belongs.
"""

from __future__ import annotations

import re
from collections import Counter

from paths import ROOT, TESTS

#: Folders of tests/ that mirror no package of gradcli/, with what they hold.
OTHER_AREAS = {
    "project": "the project as a whole: the wheel, the docs, the layers and imports, the "
               "architecture doc, bench/, the mutation settings, the cost guards, the result "
               "protocol, this layout, tests/machine.py's probes",
}
#: Folders of tests/ that hold no tests: the user files the tests load.
NOT_AREAS = {"fixtures", "__pycache__"}


def _folders():
    """Every folder under tests/ that may hold tests, as paths relative to tests/."""
    return sorted(p.relative_to(TESTS) for p in TESTS.rglob("*")
                  if p.is_dir() and not NOT_AREAS & set(p.relative_to(TESTS).parts)
                  and not p.name.startswith("."))


def _test_files():
    return sorted(p for p in TESTS.rglob("test_*.py") if not NOT_AREAS & set(p.relative_to(TESTS).parts))


def test_no_test_file_sits_directly_in_tests():
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not loose, f"move these into the area folder of what they test (docs/ARCHITECTURE.md, The tests): {loose}"


def test_every_folder_mirrors_a_package_or_is_a_documented_area():
    folders = _folders()
    assert folders, "no area folders found under tests/"
    for folder in folders:
        top = folder.parts[0]
        if top in OTHER_AREAS:
            continue
        package = ROOT / "gradcli" / folder
        assert (package / "__init__.py").is_file(), (
            f"tests/{folder.as_posix()}/ mirrors no package (gradcli/{folder.as_posix()}/ does not exist): "
            "name it after the package it tests, or add it to OTHER_AREAS with what it holds")


def test_area_folders_hold_tests_only_and_helpers_sit_in_tests():
    for folder in _folders():
        stray = sorted(p.name for p in (TESTS / folder).glob("*.py") if not p.name.startswith("test_"))
        assert not stray, f"tests/{folder.as_posix()}/ holds helpers {stray}: shared helpers sit in tests/ itself"
        assert not (TESTS / folder / "__init__.py").exists()  # basenames are unique instead (pyproject)


def test_test_file_names_are_unique_across_folders():
    names = Counter(p.name for p in _test_files())
    twice = sorted(name for name, count in names.items() if count > 1)
    assert not twice, f"two test files share a name (pytest's prepend import mode imports by basename): {twice}"


def test_architecture_doc_names_every_area():
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = doc.split("\n## The tests\n", 1)
    assert len(section) == 2, "docs/ARCHITECTURE.md has no '## The tests' section"
    text = section[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\| `tests/([a-z_/]+?)/` \|", text, flags=re.M))  # the table's first column
    areas = {folder.as_posix() for folder in _folders() if any((TESTS / folder).glob("test_*.py"))}
    assert areas - named == set(), f"areas the doc does not name: {sorted(areas - named)}"
    assert named - areas == set(), f"the doc names folders that do not exist: {sorted(named - areas)}"


#: Test files that find a file from their own place, and why they may.
OWN_PLACE = {"test_hostile.py": "its worker is this file run as a script, without pytest's pythonpath"}


def test_no_test_finds_the_project_from_its_own_folder():
    """paths.ROOT, not the test file's own grandparent folder: a file moved to another area (as four were,
    merged into this layout from the top of tests/) would look for examples/ in tests/."""
    climbing = re.compile(r"__file__\)?(\.resolve\(\))?\.parent\.parent")
    found = sorted(p.relative_to(TESTS).as_posix() for p in _test_files()
                   if p.name not in OWN_PLACE and climbing.search(p.read_text(encoding="utf-8")))
    assert not found, f"use `from paths import ROOT` (or TESTS, FIXTURES) in {found}"


def test_the_longest_files_named_for_xdist_exist():
    # conftest.py hands these out first; a renamed or moved file would silently go back to last
    from conftest import LONGEST_FIRST

    missing = [name for name in LONGEST_FIRST if not (TESTS / name).is_file()]
    assert not missing, f"conftest.py's LONGEST_FIRST names files that are not there: {missing}"
