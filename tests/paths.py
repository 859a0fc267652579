"""Where the suite's files are, for tests in any area folder (tests/<area>/test_*.py).

A test names the project's root, the shared fixtures or the tests folder through these,
never through its own `__file__`'s parents: the folder a test sits in is not part of what it
tests, and a test moved to another area keeps finding its files.
"""

from __future__ import annotations

from pathlib import Path

#: tests/: the shared helpers (conftest.py, machine.py, models.py, ...) and the area folders.
TESTS = Path(__file__).resolve().parent
#: The project's root: gradcli/, docs/, examples/, bench/, pyproject.toml.
ROOT = TESTS.parent
#: tests/fixtures/: the user files the tests load (functions, models, packages).
FIXTURES = TESTS / "fixtures"
