"""The house's layering, read from the source with `ast`: the library never reaches up.

The library folders (verify/, inspect/, health/, targets/, chain/, language/, build/) compute
plain results: they never import typer, rich, the CLI, the renderers, the plots or the public
API's rendering results (gradcli/api.py), and never print. Renderers return what to print;
only gradcli/cli/ prints.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gradcli"
LIBRARY = ("verify", "inspect", "health", "targets", "chain", "language", "build", "compare")
UPPER = ("typer", "rich", "click", "gradcli.cli", "gradcli.render", "gradcli.plot", "gradcli.api", "gradcli.demos")


def modules(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (PACKAGE / folder).rglob("*.py"))


def imported(path: Path) -> set[str]:
    """Every module `path` imports, as an absolute dotted name (relative imports resolved)."""
    package = ".".join(("gradcli", *path.relative_to(PACKAGE).parent.parts))
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names.add(module)
            names |= {f"{module}.{alias.name}" for alias in node.names}
    return names


def prints(path: Path) -> list[int]:
    """Lines that call print(...) or write to sys.stdout / sys.stderr."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if isinstance(fn, ast.Name) and fn.id == "print":
            found.append(node.lineno)
        elif (isinstance(fn, ast.Attribute) and fn.attr == "write" and isinstance(fn.value, ast.Attribute)
              and fn.value.attr in ("stdout", "stderr") and isinstance(fn.value.value, ast.Name)
              and fn.value.value.id == "sys"):
            found.append(node.lineno)
    return found


def test_the_scan_sees_what_it_should(tmp_path):
    # The scanner itself: a relative import resolves, and prints and stdout writes are found.
    assert "gradcli.verify.evaluation.evaluate" in imported(PACKAGE / "verify" / "check_elementwise.py")
    assert "typer" in imported(PACKAGE / "cli" / "app.py")
    sample = tmp_path / "sample.py"
    sample.write_text("import sys\nprint(1)\nsys.stdout.write('x')\nsys.stderr.write('y')\nlog.write('z')\n")
    assert prints(sample) == [2, 3, 4]


@pytest.mark.parametrize("path", modules(*LIBRARY), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_library_never_imports_the_upper_half(path):
    upper = sorted(n for n in imported(path) if any(n == u or n.startswith(u + ".") for u in UPPER))
    assert upper == []


@pytest.mark.parametrize("path", modules(*LIBRARY, "render", "plot"), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_cli_prints(path):
    assert prints(path) == []


@pytest.mark.parametrize("path", modules("render", "plot", *LIBRARY),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_nothing_below_the_cli_imports_it(path):
    assert not any(n == "gradcli.cli" or n.startswith("gradcli.cli.") or n == "typer" for n in imported(path))


def test_plot_takes_its_data_from_verify_s_one_public_function():
    uses = imported(PACKAGE / "plot" / "data.py")
    assert "gradcli.verify.evaluation.evaluate" in uses
    assert not any(n.startswith(("gradcli.verify.elementwise", "gradcli.verify.check", "gradcli.verify.symbolic"))
                   for n in uses)
