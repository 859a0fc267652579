"""Every package folder of gradcli ships in the wheel.

pyproject.toml lists the packages by hand (expressions/ is mapped into the package from the
top of the checkout, which setuptools' automatic discovery would not do). A folder added
without its row installs fine in editable mode and fails only on a user's machine (CI
installs the wheel), so the list is checked against the tree here.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    folders = {
        ".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "gradcli").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert folders - listed == set(), f"add to [tool.setuptools] packages in pyproject.toml: {sorted(folders - listed)}"
    assert listed - folders == {"gradcli.expressions"}, "pyproject.toml lists packages that do not exist"
