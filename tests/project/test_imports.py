"""No import circle inside gradcli: the text flows one way, and no layer reaches back up.

Every module's imports are read with `ast`, those inside functions included (a lazy import
is still a dependency, and the parser <-> library circle was two of them). Imports under
`if TYPE_CHECKING:` are left out: they never run, and an annotation may name a type from
downstream. An edge goes to the module named (`from .ops import OPS` -> language.ops;
`from . import nodes` -> language.nodes), not to the packages above it, which Python
imports first but which hold no code that imports back here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gradcli

PACKAGE = Path(gradcli.__file__).parent
#: Import circles allowed, each with its reason. There are none.
ALLOWED: dict[frozenset[str], str] = {}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, known: set[str]) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.known = known
        self.found: set[str] = set()

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
        if name == "TYPE_CHECKING":
            for statement in node.orelse:
                self.visit(statement)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, *([node.module] if node.module else [])])
        else:
            target = node.module or ""
        for alias in node.names:
            if f"{target}.{alias.name}" in self.known:  # `from . import nodes`: the submodule
                self._add(f"{target}.{alias.name}")
            else:
                self._add(target)

    def _add(self, name: str) -> None:
        if name in self.known:
            self.found.add(name)


def import_graph() -> dict[str, set[str]]:
    """gradcli module -> the gradcli modules it imports (at any depth of its code)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        visitor = _Imports(name, path.name == "__init__.py", set(modules))
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        graph[name] = visitor.found - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_function_level_and_relative_imports():
    graph = import_graph()
    assert "gradcli.language.parser" in graph["gradcli.language.library"]  # the library needs the parser
    assert "gradcli.language.nodes" in graph["gradcli.language.parser"]  # `from . import nodes as n`
    assert "gradcli.interpret.to_torch" in graph["gradcli.pipeline"]  # imported inside build_prepared
    assert "gradcli.interpret.variables" in graph["gradcli.pipeline"]


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_inside_gradcli():
    found = [c for c in circles(import_graph()) if frozenset(c) not in ALLOWED]
    assert found == [], "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_parser_never_imports_the_library():
    graph = import_graph()
    assert "gradcli.language.library" not in graph["gradcli.language.parser"]
