"""What the torch builder and the sympy translator share: dispatch and library calls.

Both walk the same AST with one `visit_<Node>` method per node type; an unknown node is an
error, never a silent fallback. A call to a library function evaluates its arguments once,
then the function's body with its parameters bound to them (let-semantics: an argument used
twice in the body is computed once, as in the PyTorch code the body stands for).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import GradcliError, UnknownNameError
from ..language import nodes as n
from ..language.ops import OPS
from ..language.signatures import bind

if TYPE_CHECKING:
    from ..language.library import Library


class Interpreter:
    """Base of the two interpreters; subclasses set `env`, `library` and `what`, and give
    `_call_op(op, node)`, the meaning of a call to an operation of the table."""

    env: dict[str, Any]
    library: "Library"
    what = "interpreter"  # for the message about a node type nobody can read

    #: node class -> the subclass's visit_<Node> method (made once per subclass, below).
    _visitors: dict[type, Any] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._visitors = {
            kind: getattr(cls, f"visit_{kind.__name__}")
            for kind in n.EXPR_TYPES
            if hasattr(cls, f"visit_{kind.__name__}")
        }

    def visit(self, node: n.Expr) -> Any:
        visit = self._visitors.get(type(node))
        if visit is None:
            raise GradcliError(f"the {self.what} cannot interpret {type(node).__name__} nodes", span=node.span)
        return visit(self, node)

    def visit_Call(self, node: n.Call) -> Any:
        # Operations win over library names (softplus is both): see language/library.py.
        op = OPS.get(node.func)
        if op is not None:
            return self._call_op(op, node)  # type: ignore[attr-defined]
        return self.call_library(node)

    def argument(self, value: Any) -> Any:
        """A bound argument's value: a node is visited; a signature default is taken as is."""
        return self.visit(value) if isinstance(value, n.EXPR_TYPES) else value

    def call_library(self, node: n.Call) -> Any:
        function = self.library.functions.get(node.func)
        if function is None:
            raise UnknownNameError(f"unknown function '{node.func}'", span=node.span)
        env = {name: self.argument(value) for name, value in bind(function, node).items()}
        saved, self.env = self.env, env
        try:
            for statement in function.body.statements:
                self.env[statement.name] = self.visit(statement.value)
            return self.visit(function.body.output)
        except GradcliError as err:
            # Point at the call in the user's text, not into the library body.
            raise type(err)(f"in {node.func}(...): {err.message}", span=node.span, hint=err.hint) from None
        finally:
            self.env = saved
