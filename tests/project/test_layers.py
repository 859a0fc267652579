"""The house's floors, read from the source with `ast`: no import runs back up.

Every module of gradcli/ sits on a floor; it may import from its own floor and the floors
below, never from one above. The order is the flow of the text (STYLE.md): the shared base,
then the language, its two interpreters, the exact derivative, the targets and their
recorder, the graph walk, each command's own work, the trace command that puts several of
them together, the demos' content, the pictures, the renderers, the public API and the CLI.
The library never imports typer, rich, the CLI, the renderers or the plots, and only
gradcli/cli/ prints.

An import under `if TYPE_CHECKING:` does not run, but the name it gives a type is still a
dependency on the floor that defines it: it counts as an import back up like any other (a
type both floors need moves down, as targets/base.py's PassError did).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from paths import ROOT

PACKAGE = ROOT / "gradcli"

#: Low to high. A module's floor is its longest listed prefix; a floor's modules may import
#: each other's (same floor) and anything below. The package's own name stands for
#: gradcli/__init__.py alone, never as a prefix: a new folder or module must be given a floor.
FLOORS: list[tuple[str, ...]] = [
    ("gradcli.errors", "gradcli.limits", "gradcli.options", "gradcli.seeds", "gradcli.reading", "gradcli.outcome",
     "gradcli.words", "gradcli.widths", "gradcli._deep", "gradcli._quiet_gc"),
    ("gradcli.language",),
    ("gradcli.interpret", "gradcli.pipeline"),
    ("gradcli.exact",),
    ("gradcli.graph.nodes",),  # the one walk of grad_fn: the recorder tags nodes with it
    ("gradcli.targets",),
    ("gradcli.graph",),
    # each command's own work; verify/'s rooms in the order they build on each other
    ("gradcli.verify.finite_differences", "gradcli.verify.causes", "gradcli.chain", "gradcli.health",
     "gradcli.comparison", "gradcli.footprint", "gradcli.distributed"),
    ("gradcli.verify.expression",),
    ("gradcli.verify.function",),
    ("gradcli.verify.discovery", "gradcli.verify"),
    ("gradcli.tracing",),
    ("gradcli.watcher",),  # a run checked step by step: health's verdicts, causes' reasoning, the recorder
    ("gradcli.divergence",),  # two runs of one script side by side (watch's way of running a script, compare's setups)
    ("gradcli.demos",),
    ("gradcli.plot",),
    ("gradcli.render",),
    ("gradcli.api", "gradcli", "gradcli.callbacks"),  # gradcli/__init__.py (the public names, imported lazily): that module only
    ("gradcli.cli", "gradcli.__main__"),
]
LIBRARY = ("language", "interpret", "exact", "targets", "graph", "verify", "chain", "health", "comparison", "footprint",
           "distributed", "tracing", "watcher", "divergence")
UPPER = ("typer", "rich", "click", "gradcli.cli", "gradcli.render", "gradcli.plot", "gradcli.api", "gradcli.demos")


def modules(*folders: str) -> list[Path]:
    return sorted(p for folder in folders if (PACKAGE / folder).is_dir() for p in (PACKAGE / folder).rglob("*.py"))


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_nodes(tree: ast.AST):
    """Every node of `tree` except the bodies of `if TYPE_CHECKING:` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                stack.extend(child.orelse)
            else:
                stack.append(child)


def imported(path: Path, *, runtime_only: bool = False, root: Path = PACKAGE) -> set[str]:
    """Every module `path` (a file of the package at `root`) imports, as an absolute dotted
    name (relative imports resolved)."""
    package = ".".join(("gradcli", *path.relative_to(root).parent.parts))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in (_runtime_nodes(tree) if runtime_only else ast.walk(tree)):
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


def floor_of(name: str) -> int | None:
    """The floor of module `name` (a name imported from a module counts as that module)."""
    best, floor = -1, None
    for level, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            below = name.startswith(prefix + ".") and prefix != "gradcli"
            if (name == prefix or below) and len(prefix) > best:
                best, floor = len(prefix), level
    return floor


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


def upward(path: Path, root: Path = PACKAGE) -> list[str]:
    """The imports of `path` that reach a floor above its own, type-only ones included (a
    name for a type is a dependency on the floor that defines it; a module on no floor has no
    floor to stay on: that is reported too)."""
    own = floor_of(module_name(path, root))
    if own is None:
        return [f"{module_name(path, root)} is on no floor"]
    found = []
    for name in imported(path, root=root):
        if not name.startswith("gradcli."):
            continue
        floor = floor_of(name)
        if floor is not None and floor > own:
            found.append(f"{name} (floor {floor} > {own})")
    return sorted(found)


def test_the_scan_sees_what_it_should(tmp_path):
    # The scanner itself: a relative import resolves, prints and stdout writes are found, a
    # type-only import is not counted as one that runs, and an upward import is caught.
    assert "gradcli.exact.evaluation.evaluate" in imported(PACKAGE / "verify" / "expression" / "elementwise_mode.py")
    assert "typer" in imported(PACKAGE / "cli" / "app.py")
    sample = tmp_path / "sample.py"
    sample.write_text("import sys\nprint(1)\nsys.stdout.write('x')\nsys.stderr.write('y')\nlog.write('z')\n")
    assert prints(sample) == [2, 3, 4]
    typed = tmp_path / "typed.py"
    typed.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gradcli.graph.explain import PassError\n")
    assert "gradcli.graph.explain" in imported(typed, root=tmp_path)
    assert "gradcli.graph.explain" not in imported(typed, runtime_only=True, root=tmp_path)
    assert floor_of("gradcli.exact.symbolic") < floor_of("gradcli.chain.rule") < floor_of("gradcli.render.text")
    assert floor_of("gradcli.verify.function.check") > floor_of("gradcli.verify.expression.result")


def unplaced(root: Path = PACKAGE) -> list[str]:
    """The modules of the package at `root` that sit on no floor."""
    return sorted(module_name(p, root) for p in root.rglob("*.py") if floor_of(module_name(p, root)) is None)


def test_every_module_has_a_floor():
    assert unplaced() == []


def test_the_floors_test_fails_on_a_module_on_no_floor_or_importing_upward(tmp_path):
    # A planted package in the shape of gradcli/: a new folder nobody gave a floor, a module of
    # the exact derivative reaching up into the renderers (at run time, and only for its type,
    # which counts too), and one importing down as it should. The checks above must see
    # the first two, or they would pass on anything.
    root = tmp_path / "gradcli"
    files = {
        "__init__.py": "",
        "newroom/__init__.py": "",
        "newroom/work.py": "from ..language import parser\n",
        "exact/__init__.py": "",
        "exact/planted.py": "from ..render.text import TextFormat\n",
        "exact/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..render.text import TextFormat\n",
        "exact/fine.py": "from ..language.parser import parse\nimport gradcli.interpret.to_sympy\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert unplaced(root) == ["gradcli.newroom", "gradcli.newroom.work"]
    assert upward(root / "newroom" / "work.py", root) == ["gradcli.newroom.work is on no floor"]
    assert upward(root / "exact" / "planted.py", root) == [
        f"gradcli.render.text (floor {floor_of('gradcli.render')} > {floor_of('gradcli.exact')})",
        f"gradcli.render.text.TextFormat (floor {floor_of('gradcli.render')} > {floor_of('gradcli.exact')})",
    ]
    assert upward(root / "exact" / "typed.py", root) == upward(root / "exact" / "planted.py", root)
    assert upward(root / "exact" / "fine.py", root) == []
    assert floor_of("gradcli") is not None  # the package's own __init__ keeps its floor


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_runs_back_up_a_floor(path):
    assert upward(path) == []


def test_no_ring_of_modules_imports_itself():
    # A pair or ring of modules importing each other, lazily or only for a type: each such
    # import is held together by a lazy import today and a circular ImportError tomorrow.
    names = {module_name(p): p for p in PACKAGE.rglob("*.py")}

    def module_of(name: str) -> str | None:
        while name and name not in names:
            name = name.rpartition(".")[0]
        return name if name and name != "gradcli" else None

    edges = {m: {t for n in imported(p) if (t := module_of(n)) and t != m} for m, p in names.items()}
    rings = []
    for start in sorted(edges):  # a ring through `start`: a path back to it
        seen, stack = set(), [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in edges[node]:
                if nxt == start:
                    rings.append(" -> ".join([*path, start]))
                elif nxt not in seen and nxt > start:  # each ring once, from its smallest module
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert rings == []


def room(name: str) -> str | None:
    """The room of module `name`: its folder (`gradcli.graph`), or the part of a folder that
    FLOORS puts on a floor of its own (`gradcli.graph.nodes`, below the targets that use it)."""
    parts = name.split(".")
    if len(parts) < 3 or parts[0] != "gradcli" or not (PACKAGE / parts[1]).is_dir():
        return None
    own = max((p for floor in FLOORS for p in floor if name == p or name.startswith(p + ".")), key=len, default="")
    return own if own.count(".") >= 2 else ".".join(parts[:2])


def test_no_two_folders_import_each_other():
    # Same-floor folders may use each other one way; both ways is a cycle waiting to grow.
    uses: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        here = room(module_name(path))
        if here is not None:
            uses.setdefault(here, set()).update(
                there for n in imported(path, runtime_only=True) if (there := room(n)) not in (None, here))
    assert sorted((a, b) for a in uses for b in uses[a] if a < b and a in uses.get(b, set())) == []
    assert room("gradcli.graph.nodes") == "gradcli.graph.nodes" and room("gradcli.graph.walk.Graph") == "gradcli.graph"


@pytest.mark.parametrize("path", modules(*LIBRARY), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_library_never_imports_the_upper_half(path):
    upper = sorted(n for n in imported(path) if any(n == u or n.startswith(u + ".") for u in UPPER))
    assert upper == []


@pytest.mark.parametrize("path", modules(*LIBRARY, "render", "plot"), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_cli_prints(path):
    assert prints(path) == []


def test_no_folder_holds_more_than_twenty_modules_or_shadows_the_standard_library():
    import sys

    crowded = {str(d.relative_to(PACKAGE)): n for d in [PACKAGE, *(p.parent for p in PACKAGE.rglob("__init__.py"))]
               if (n := len(list(d.glob("*.py")))) > 20 and d.name != "__pycache__"}
    assert crowded == {}
    shadowing = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists() and p.name in sys.stdlib_module_names)
    assert shadowing == []


def test_plot_takes_its_data_from_the_exact_derivative_s_one_public_function():
    uses = imported(PACKAGE / "plot" / "data.py")
    assert "gradcli.exact.evaluation.evaluate" in uses
    assert not any(n.startswith(("gradcli.exact.elementwise", "gradcli.verify.expression", "gradcli.exact.symbolic"))
                   for n in uses)
