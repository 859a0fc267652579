"""`--symbolic --create-graph`: the gradient's own graph written out like the first one.

torch's second backward runs sum(gradient) back through the graph that `--create-graph`
recorded while computing the gradient. Each node of that graph gets its output as a formula
of its inputs (chain/backward_ops.py), its local derivatives (sympy's partial derivatives
of that formula), the gradient along each edge, the sum where paths meet, their values
beside what hooks saw in that very backward, and at each variable the composed second
derivative, proved equal to sympy's second derivative by proof.py as the first one is.

Written for elementwise mode, where one symbol stands for every element; in elements mode
(softmax, matmul, reductions over a dim) the graph carries a note instead. A node kind
without a row in backward_ops.py, or a constant torch kept nowhere, leaves the graph with a
note saying which ("not written as formulas: ..."), never a guess.
"""

from __future__ import annotations

from typing import Any

from ..graph.nodes import inputs_of, is_accumulate, walk
from .backward_ops import BACKWARD_OPS, UNUSED
from . import numbers, proof
from .forms import formula
from .result import Definition, Edge, Formula, Node, Numbers, SecondGraph, SecondLeaf


class _Unwritten(Exception):
    """A node this module cannot write as a formula; the graph says so in its note."""


def second_graphs(
    live: dict[str, Any], variables: dict[str, Any], leaf_symbols: dict[str, Any], symbol_of: dict[int, Any],
    definitions: dict[Any, Any], env: dict[Any, Any], firsts: dict[str, Any] | str, tolerance: tuple[float, float],
    gradient_ids: dict[str, dict[int, str]],
) -> list[SecondGraph]:
    """`live`: each variable's gradient (with its graph); `symbol_of`: id(grad_fn) -> the
    first graph's value symbol; `firsts`: sympy's first derivative by variable (0-d arrays);
    `gradient_ids`: the ids trace's gradient graphs gave the nodes, by variable."""
    found = []
    for name, gradient in live.items():
        if gradient is None or gradient.grad_fn is None:
            found.append(SecondGraph(name, note="the gradient has no graph: it depends on no variable"))
            continue
        try:
            found.append(_Writer(gradient, variables, leaf_symbols, symbol_of, definitions, env, tolerance,
                                 gradient_ids.get(name, {})).write(name, firsts))
        except _Unwritten as why:
            found.append(SecondGraph(name, note=f"not written as formulas: {why}"))
    return found


class _Writer:
    def __init__(self, gradient: Any, variables: dict[str, Any], leaf_symbols: dict[str, Any], symbol_of: dict[int, Any],
                 definitions: dict[Any, Any], env: dict[Any, Any], tolerance: tuple[float, float],
                 ids: dict[int, str]) -> None:
        import numpy as np
        import sympy as sp

        self.sp, self.np = sp, np
        self.gradient, self.tolerance = gradient, tolerance
        self.variables = variables
        self.leaf_of = {id(t): leaf_symbols[name].item() for name, t in variables.items()}
        self.symbol_of = {k: v.item() for k, v in symbol_of.items()}
        self.definitions = dict(definitions)
        self.env = dict(env)
        self.order = list(walk(gradient.grad_fn, order="post"))  # each node after its inputs
        self.ids = {id(fn): ids.get(id(fn), "?") for fn in self.order}
        self.values: dict[int, Any] = {}  # id(fn) -> its output's symbol
        self.constants: list[Definition] = []
        self.counter = 0

    def fresh(self, base: str) -> Any:
        self.counter += 1
        return self.sp.Symbol(f"{base}{self.counter}", real=True)

    # -- the graph's values, from the inputs up --------------------------------------------
    def forward(self) -> dict[int, tuple[Any, list[Any], Any]]:
        """id(fn) -> (output symbol, input values per edge, formula). An input torch neither
        recorded nor saved is a placeholder first, solved from a value torch did keep."""
        written: dict[int, tuple[Any, list[Any], Any]] = {}
        self.unknown: list[Any] = []
        for fn in self.order:
            if is_accumulate(fn):  # AccumulateGrad: a variable
                if id(fn.variable) not in self.leaf_of:
                    raise _Unwritten("the graph reaches a tensor that is not a variable")
                self.values[id(fn)] = self.leaf_of[id(fn.variable)]
                continue
            row = BACKWARD_OPS.get(fn.name())
            if row is None:
                raise _Unwritten(f"{fn.name()} has no row in chain/backward_ops.py")
            inputs = [None if nxt is None else self.values[id(nxt)] for nxt in inputs_of(fn)]
            if len(inputs) != len(row.saved):
                raise _Unwritten(f"{fn.name()} has {len(inputs)} inputs, its row {len(row.saved)}")
            filled = [x if x is not None else self._saved(fn, row.saved[i]) for i, x in enumerate(inputs)]
            meaning = row.meaning(self.sp, filled, fn)
            known = self.symbol_of.get(id(fn))
            symbol = known if known is not None else self.fresh("w")
            if known is None:
                self.definitions[symbol] = meaning
            self.values[id(fn)] = symbol
            written[id(fn)] = (symbol, filled, meaning)
        if self.unknown:
            solved = self._solve()
            written = {k: (s, [self._sub(x, solved) for x in i], self._sub(m, solved)) for k, (s, i, m) in written.items()}
            for symbol in list(self.definitions):
                self.definitions[symbol] = self._sub(self.definitions[symbol], solved)
        for symbol, _, meaning in written.values():
            if symbol not in self.env:
                self.env[symbol] = self._value(meaning)
        return written

    def _sub(self, expr: Any, solved: dict[Any, Any]) -> Any:
        return expr.xreplace(solved) if hasattr(expr, "xreplace") else expr

    def _value(self, expr: Any) -> Any:
        from ..exact.symbolic import evaluate

        value = evaluate(expr, self.env, 1)
        scalar = all(self.env[s].dim() == 0 for s in getattr(expr, "free_symbols", ()) if s in self.env)
        return value.reshape(()) if scalar else value

    def _saved(self, fn: Any, attribute: str | None) -> Any:
        if attribute == UNUSED:
            return self.sp.Integer(0)
        if attribute is None or getattr(fn, attribute, None) is None:
            placeholder = self.sp.Symbol(f"c{len(self.unknown) + 1}", real=True)
            self.unknown.append(placeholder)
            return placeholder
        return self._constant(getattr(fn, attribute))

    def _constant(self, tensor: Any, *, recovered: bool = False) -> Any:
        """A value no variable reaches: a number when every element is the same, else a
        named constant with its values. A recovered one (a difference of two floats) is
        read as the simple number within rounding of it (1, not 0.9999999999999998)."""
        import torch

        from ..interpret.to_sympy import symbolic_number

        value = torch.as_tensor(tensor, dtype=torch.float64).detach()
        flat = value.reshape(-1)
        if recovered and flat.numel() and bool(torch.allclose(flat, flat[0].expand_as(flat), rtol=1e-9, atol=1e-12)):
            return self.sp.nsimplify(float(flat[0]), rational=True, tolerance=1e-9)
        if flat.numel() and bool((flat == flat[0]).all()):
            return symbolic_number(float(flat[0]))
        symbol = self.fresh("k")
        self.env[symbol] = value
        self.constants.append(Definition(str(symbol), Formula(str(numbers.plain(value)), str(numbers.plain(value)))))
        return symbol

    def _solve(self) -> dict[Any, Any]:
        """Each placeholder from a node whose value torch kept (the gradient itself at the
        root, or an input a node saved) and whose formula holds that placeholder alone."""
        sp = self.sp
        kept = [(self.gradient.grad_fn, self.gradient.detach())]
        for fn in self.order:
            row = BACKWARD_OPS.get(fn.name())
            for index, nxt in enumerate(inputs_of(fn)):
                if row is None or nxt is None or index >= len(row.saved) or row.saved[index] in (None, UNUSED):
                    continue
                saved = getattr(fn, row.saved[index], None)
                if saved is not None:
                    kept.append((nxt, saved.detach()))
        solved: dict[Any, Any] = {}
        out = sp.Symbol("out", real=True)
        progress = True
        while progress and len(solved) < len(self.unknown):
            progress = False
            for fn, value in kept:
                expr = self._full(self.values.get(id(fn))).xreplace(solved)
                open_ = [c for c in self.unknown if c in expr.free_symbols and c not in solved]
                if len(open_) != 1:
                    continue
                answers = sp.solve(sp.Eq(expr, out), open_[0])
                if len(answers) != 1:
                    continue
                env = dict(self.env)
                env[out] = value.double()
                number = numbers.evaluate_array(self.np.asarray(answers[0], dtype=object), env, tuple(value.shape))
                solved[open_[0]] = self._constant(number, recovered=True)
                progress = True
        if len(solved) < len(self.unknown):
            raise _Unwritten("a node adds a constant whose value torch did not keep")
        return solved

    def _full(self, symbol: Any) -> Any:
        """A value of this graph in the first graph's values, the variables and placeholders."""
        expr = symbol if symbol is not None else self.sp.Integer(0)
        for _ in range(len(self.definitions) + 1):
            news = {s: self.definitions[s] for s in expr.free_symbols if s in self.definitions and str(s).startswith("w")}
            if not news:
                return expr
            expr = expr.xreplace(news)
        return expr

    # -- sum(gradient) backpropagated ------------------------------------------------------
    def write(self, of: str, firsts: dict[str, Any] | str) -> SecondGraph:
        import torch

        sp, np = self.sp, self.np
        written = self.forward()
        seen = _hooked_backward(self.gradient, self.order, list(self.variables.values()))
        hooks, seconds = seen[0], dict(zip(self.variables, seen[1]))
        arriving: dict[Any, list[tuple[Any, Any]]] = {self.values[id(self.gradient.grad_fn)]: [(sp.Integer(1), torch.ones(()))]}
        nodes = []
        leaf_terms: dict[Any, list[tuple[Any, Any]]] = {}
        for fn in reversed(self.order):
            if id(fn) not in written:
                continue
            symbol, inputs, meaning = written[id(fn)]
            came = arriving.pop(symbol, None)
            if not came:
                continue
            grad = sp.Symbol(f"gg_{symbol}", real=True)
            total = sum((t for t, _ in came), sp.Integer(0))
            self.definitions[grad] = total
            shape = self._shape(symbol)
            value = numbers.fitted_sum([v for _, v in came], shape)
            self.env[grad] = value
            hook = hooks.get(id(fn))
            torch_value = None if hook is None else numbers.plain(hook[1][0]) if hook[1] and hook[1][0] is not None else None
            node = Node(
                self.ids[id(fn)], fn.name(), fn.name(), str(symbol), formula(sp, np, np.asarray(meaning, dtype=object)),
                str(grad), [formula(sp, np, np.asarray(t, dtype=object)) for t, _ in came],
                formula(sp, np, np.asarray(total, dtype=object)), [],
                numbers=Numbers(numbers.plain(value), torch_value, numbers.compare(value, torch_value, self.tolerance)),
            )
            dummies = [sp.Symbol(f"a{i}", real=True) for i in range(len(inputs))]
            generic = BACKWARD_OPS[fn.name()].meaning(sp, dummies, fn)
            for index, nxt in enumerate(inputs_of(fn)):
                if nxt is None or id(nxt) not in self.values:
                    continue
                local = sp.diff(generic, dummies[index]).xreplace(dict(zip(dummies, inputs)))
                flowing = grad * local
                target = self.values[id(nxt)]
                flow_value = numbers.evaluate_array(np.asarray(flowing, dtype=object), self.env, self._shape(target))
                torch_edge = None
                if hook is not None and hook[0] and index < len(hook[0]) and hook[0][index] is not None:
                    torch_edge = numbers.plain(hook[0][index])
                local_value = None
                if getattr(local, "free_symbols", None):
                    local_value = numbers.plain(numbers.evaluate_array(np.asarray(local, dtype=object), self.env, shape))
                node.edges.append(Edge(
                    index, self.ids.get(id(nxt)), f"input {index}", str(target), formula(sp, np, np.asarray(local, dtype=object)),
                    formula(sp, np, np.asarray(flowing, dtype=object)), [],
                    Numbers(numbers.plain(flow_value), torch_edge, numbers.compare(flow_value, torch_edge, self.tolerance)),
                    local_value,
                ))
                bucket = leaf_terms if is_accumulate(nxt) else arriving
                bucket.setdefault(target, []).append((flowing, flow_value))
            nodes.append(node)
        leaves = [self._leaf(of, name, leaf_terms, firsts, seconds) for name in self.variables]
        graph = SecondGraph(of, nodes, [leaf for leaf in leaves if leaf is not None], self.constants)
        graph.definitions = [Definition(str(s), formula(sp, np, np.asarray(e, dtype=object)))
                             for s, e in self.definitions.items() if str(s).startswith(("w", "gg_"))]
        return graph

    def _leaf(self, of: str, name: str, terms: dict[Any, list[tuple[Any, Any]]], firsts: dict[str, Any] | str,
              seconds: dict[str, Any]) -> SecondLeaf | None:
        sp, np = self.sp, self.np
        variable = self.leaf_of[id(self.variables[name])]
        came = terms.get(variable)
        if not came:
            return None
        composed = sum((t for t, _ in came), sp.Integer(0))
        value = numbers.fitted_sum([v for _, v in came], tuple(self.variables[name].shape))
        torch_value = None if seconds.get(name) is None else numbers.plain(seconds[name])
        known = proof.sizes(self.definitions)
        expanded = proof.expand(composed, self.definitions, known)
        reference = None
        if isinstance(firsts, str) or of not in firsts:
            kind, said = "none", "not compared: " + (firsts if isinstance(firsts, str) else "no first derivative")
        else:
            reference = sp.diff(firsts[of].item(), variable)
            pair = np.asarray(expanded, dtype=object), np.asarray(reference, dtype=object)
            kind, said = proof.prove(
                None if expanded is None else pair[0], pair[1],
                lambda: self._numeric(composed, reference),
            )
        return SecondLeaf(
            name, [formula(sp, np, np.asarray(t, dtype=object)) for t, _ in came],
            formula(sp, np, np.asarray(composed, dtype=object)),
            None if expanded is None else formula(sp, np, np.asarray(sp.simplify(expanded), dtype=object)),
            None if reference is None else formula(sp, np, np.asarray(sp.simplify(reference), dtype=object)),
            kind, said, Numbers(numbers.plain(value), torch_value, numbers.compare(value, torch_value, self.tolerance)),
        )

    def _shape(self, symbol: Any) -> tuple[int, ...]:
        """A value's shape: as torch computed it (broadcast values are summed back to it)."""
        value = self.env.get(symbol)
        return tuple(value.shape) if value is not None else tuple(self.gradient.shape)

    def _numeric(self, composed: Any, reference: Any) -> tuple[bool, int]:
        """The composition (through the named values) and sympy's second derivative at the
        traced values and at proof.RANDOM_POINTS points near them (the constants, values no
        variable reaches, kept): (all agree, random points used)."""
        import torch

        from ..exact.symbolic import evaluate

        generator = torch.Generator().manual_seed(0)
        leaves = {self.leaf_of[id(t)]: t.detach().double() for t in self.variables.values()}
        fixed = {s: v for s, v in self.env.items() if s not in self.definitions and s not in leaves}
        points = [leaves] + [
            {s: t * (1 + 0.1 * (2 * torch.rand(t.shape, generator=generator, dtype=torch.float64) - 1)) for s, t in leaves.items()}
            for _ in range(proof.RANDOM_POINTS)
        ]
        for point in points:
            values = {**fixed, **point}
            for symbol, definition in self.definitions.items():
                value = evaluate(definition, values, 1)
                scalar = all(values[s].dim() == 0 for s in definition.free_symbols if s in values)
                values[symbol] = value.reshape(()) if scalar else value
            if not torch.allclose(evaluate(composed, values, 1), evaluate(reference, values, 1),
                                  rtol=1e-7, atol=1e-10, equal_nan=True):
                return False, proof.RANDOM_POINTS
        return True, proof.RANDOM_POINTS


def _hooked_backward(gradient: Any, order: list[Any], variables: list[Any]) -> tuple[dict[int, Any], dict[str, Any]]:
    """sum(gradient) backpropagated through its graph with a hook on every node: id(fn) ->
    (gradients sent along its edges, gradients arriving), and d/dv sum(gradient) per variable."""
    import torch

    seen: dict[int, Any] = {}
    handles = []
    for fn in order:
        def hook(grad_inputs: Any, grad_outputs: Any, fn: Any = fn) -> None:
            seen.setdefault(id(fn), ([None if g is None else g.detach().double() for g in grad_inputs],
                                     [None if g is None else g.detach().double() for g in grad_outputs]))
        handles.append(fn.register_hook(hook))
    try:
        found = torch.autograd.grad(gradient.sum(), variables, retain_graph=True, allow_unused=True)
    finally:
        for handle in handles:
            handle.remove()
    return seen, found
