"""The chain rule written out: each recorded operation as a formula in named values, its
local derivatives from language/derivatives.py, and the gradients composed in reverse.

Every value gets a name (an assigned name, or u1, u2, ... for the unnamed ones) and every
gradient one too (g_h for the gradient arriving at h), so each formula is one operation
deep: the 40-level doubling DAG (2^40 paths) is written in a number of formulas linear in
its nodes, the named subexpressions that sympy's `cse` would find. Values are numpy object
arrays of sympy expressions: 0-d in elementwise mode (a symbol stands for every element),
shaped like the tensor in elements mode (one symbol per element).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..interpret.to_sympy import symbolic_number
from ..language.derivatives import LOCALS, OPERATOR_PARAMS, Local, sum_to
from ..language.ops import LITERAL_KINDS, OPS, REQUIRED
from . import forms
from ..interpret.applications import Application


@dataclass
class Step:
    """One differentiable operation: its row, its arguments as values, its output names."""

    app: Application
    key: str  # the row of derivatives.LOCALS
    params: list[str]
    args: dict[str, Any]  # param -> value array (or a plain option: dim, keepdim, None)
    options: dict[str, Any]  # dim/keepdim for coupling rows
    out: Any  # the output's symbol array
    definition: Any  # the output as a formula of the arguments
    inputs: list[tuple[str, Any]] = field(default_factory=list)  # (param, tensor) needing grad
    gradient: Any = None  # the gradient's symbol array
    terms: list[Any] = field(default_factory=list)  # contributions arriving, per path
    edges: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # param -> (local, gradient)


@dataclass
class Composition:
    """Every step, the leaves' gradient terms and every named value's definition."""

    steps: list[Step]
    symbols: dict[int, Any]  # id(tensor) -> its value array
    leaf_symbols: dict[str, Any]  # variable -> its symbol array
    leaf_terms: dict[str, list[Any]]
    definitions: dict[Any, Any]  # Symbol -> formula (one operation deep), in order
    seed: Any
    elements: bool


def compose(
    applications: list[Application], leaves: dict[str, Any], output: Any, bindings: list[tuple[str, Any]],
    *, elements: bool, seed: Any,
) -> Composition:
    """`leaves` maps names to leaf tensors; `seed` is the output's starting gradient (an array)."""
    import numpy as np
    import sympy as sp

    writer = _Writer(sp, np, elements, leaves, bindings)
    steps = [step for step in (writer.forward(app) for app in applications) if step is not None]
    writer.backward(steps, output, seed)
    return Composition(
        steps, writer.symbols, writer.leaf_symbols,
        {name: writer.grads.get(id(t), []) for name, t in leaves.items() if t.requires_grad},
        writer.definitions, seed, elements,
    )


class _Writer:
    def __init__(self, sp: Any, np: Any, elements: bool, leaves: dict[str, Any], bindings: list[tuple[str, Any]]) -> None:
        self.sp, self.np, self.elements = sp, np, elements
        self.used: set[str] = set(leaves)
        self.symbols: dict[int, Any] = {}
        self.alive: list[Any] = []
        self.definitions: dict[Any, Any] = {}
        # With one symbol per element, an integer leaf (token ids, labels, an index) is data,
        # written as its numbers: gather and x[i] need to know which element they pick.
        self.leaf_symbols = {name: self.value(t) if elements and not (t.is_floating_point() or t.is_complex())
                             else self.array_of(name, t) for name, t in leaves.items()}
        for name, t in leaves.items():
            self.symbols[id(t)] = self.leaf_symbols[name]
        self.bound: dict[int, str] = {}
        for name, value in bindings:
            self.bound.setdefault(id(value), name)
        self.counter = 0
        self.grads: dict[int, list[Any]] = {}

    # -- names ---------------------------------------------------------------------------------
    def fresh(self, base: str | None) -> str:
        if base is None:
            self.counter += 1
            name = f"u{self.counter}"
            while name in self.used:
                self.counter += 1
                name = f"u{self.counter}"
        else:
            name, k = base, 1
            while name in self.used:
                k += 1
                name = f"{base}{k}"
        self.used.add(name)
        return name

    def array_of(self, name: str, tensor: Any) -> Any:
        np, sp = self.np, self.sp
        if not self.elements or tensor.dim() == 0:
            return np.asarray(sp.Symbol(name, real=True), dtype=object)
        array = np.empty(tuple(tensor.shape), dtype=object)
        for index in np.ndindex(*array.shape):
            array[index] = sp.Symbol(f"{name}_{'_'.join(map(str, index))}", real=True)
        return array

    # -- forward -------------------------------------------------------------------------------
    def value(self, item: Any) -> Any:
        """The symbolic value of an argument: a tensor's names, a number exactly."""
        np = self.np
        if hasattr(item, "grad_fn"):
            known = self.symbols.get(id(item))
            if known is not None:
                return known
            # A constant the builder made a tensor (exp(2)): its exact value, elementwise.
            self.alive.append(item)
            flat = [symbolic_number(float(v)) for v in item.detach().reshape(-1).tolist()]
            array = np.asarray(flat[0], dtype=object) if item.dim() == 0 or not self.elements else \
                np.asarray(flat, dtype=object).reshape(tuple(item.shape))
            self.symbols[id(item)] = array
            return array
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            return np.asarray(symbolic_number(item), dtype=object)
        return item  # None, a bool, a dim

    def forward(self, app: Application) -> Step | None:
        result = app.result
        if not hasattr(result, "grad_fn"):
            return None
        self.alive.append(result)
        if any(result is arg for arg in app.args):  # +x is x
            self.symbols[id(result)] = self.symbols.get(id(app.args[0]), self.value(app.args[0]))
            return None
        key = _key(app)
        params = _params(key)
        args = _bind(params, app, key)
        values = {p: v if _literal(key, p) else self.value(v) for p, v in args.items()}
        first = app.args[0] if app.args else None
        values["__numel__"] = first.numel() if hasattr(first, "numel") else 1
        if key in (">", ">=", "<", "<="):
            relation = {">": self.sp.Gt, ">=": self.sp.Ge, "<": self.sp.Lt, "<=": self.sp.Le}[key]
            self.symbols[id(result)] = self.np.asarray(self.np.frompyfunc(relation, 2, 1)(values["self"], values["other"]), dtype=object)
            return None
        if not self.elements and LOCALS[key].coupling and LOCALS[key].per_element is None:
            # Elementwise mode holds only dead statements like this (exact/plan.py prunes
            # them; a live one couples elements and makes the mode "elements").
            return None
        definition = self.meaning(key, params, values, result)
        if result.grad_fn is None:  # no variable reaches it: a constant for the formulas
            self.symbols[id(result)] = definition
            return None
        out = self.array_of(self.fresh(self.bound.get(id(result))), result)
        self.symbols[id(result)] = out
        for symbol, formula in zip(out.flat, self.np.broadcast_to(definition, out.shape).flat):
            self.definitions[symbol] = formula
        inputs = [(p, v) for p, v in args.items() if hasattr(v, "requires_grad") and v.requires_grad]
        options = {p: values[p] for p in ("dim", "keepdim") if p in args}
        return Step(app, key, params, values, options, out, definition, inputs)

    def meaning(self, key: str, params: list[str], values: dict[str, Any], result: Any) -> Any:
        """The operation's output as a formula of its arguments: ops.py's meaning."""
        np, sp = self.np, self.sp
        if key in _ARITHMETIC:
            fn = np.frompyfunc(_ARITHMETIC[key], len(params), 1)
            return np.asarray(fn(*(values[p] for p in params)), dtype=object)
        op = OPS[key]
        row = LOCALS[key]
        if row.coupling and not self.elements:
            # A final whole-tensor sum or mean read elementwise (see exact/plan.py "reduced").
            count = _count(values)
            return np.asarray(row.per_element(sp, count) * values["input"].item(), dtype=object)
        if op.kind != "elementwise":
            ordered = [values[p] for p in params]
            return np.asarray(op.sympy(sp, np, *ordered), dtype=object)
        tensors = [p for p in params if isinstance(values[p], np.ndarray)]

        def scalar(*elements: Any) -> Any:
            bound = dict(values)
            bound.update(zip(tensors, elements))
            return op.sympy(sp, *(bound[p] for p in params))

        return np.asarray(np.frompyfunc(scalar, len(tensors), 1)(*(values[p] for p in tensors)), dtype=object)

    # -- backward ------------------------------------------------------------------------------
    def backward(self, steps: list[Step], output: Any, seed: Any) -> None:
        np = self.np
        self.grads = {id(output): [seed]}
        for step in reversed(steps):
            terms = self.grads.pop(id(step.app.result), None)
            if not terms:
                continue  # not on a path to the output
            step.terms = terms
            step.gradient = self.array_of("g_" + _base(step.out), step.app.result)
            total = forms.total(np, terms)
            for symbol, formula in zip(step.gradient.flat, np.broadcast_to(total, step.gradient.shape).flat):
                self.definitions[symbol] = formula
            row = LOCALS[step.key]
            if row.coupling:
                self.vjp(step, row)
            else:
                self.chain(step, row)

    def chain(self, step: Step, row: Local) -> None:
        np, sp = self.np, self.sp
        params = step.params
        tensors = [p for p in params if isinstance(step.args[p], np.ndarray)]
        for param, tensor in step.inputs:
            partial = row.partials[param]

            def local(*elements: Any, partial: Any = partial) -> Any:
                *items, out = elements
                bound = dict(step.args)
                bound.update(zip(tensors, items))
                return partial.formula(sp, *(bound[p] for p in params), out)

            fn = np.frompyfunc(local, len(tensors) + 1, 1)
            derivative = np.asarray(fn(*(step.args[p] for p in tensors), step.out), dtype=object)
            flowing = np.asarray(step.gradient * derivative, dtype=object)
            if self.elements:
                flowing = sum_to(np, flowing, tuple(tensor.shape))
            step.edges[param] = (derivative, flowing)
            self.grads.setdefault(id(tensor), []).append(flowing)

    def vjp(self, step: Step, row: Local) -> None:
        np, sp = self.np, self.sp
        for param, tensor in step.inputs:
            if self.elements:
                flowing = row.vjp(sp, np, step.gradient, step.args, step.out, **step.options)[param]
                derivative = np.asarray(sp.Symbol(row.words), dtype=object)
            else:
                derivative = np.asarray(row.per_element(sp, _count(step.args)), dtype=object)
                flowing = np.asarray(step.gradient * derivative, dtype=object)
            step.edges[param] = (derivative, flowing)
            self.grads.setdefault(id(tensor), []).append(flowing)


_ARITHMETIC = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: a / b, "**": lambda a, b: a**b, "neg": lambda a: -a,
}


def _key(app: Application) -> str:
    if app.name == "-" and len(app.args) == 1:
        return "neg"
    return "matmul" if app.name == "@" else app.name


def _params(key: str) -> list[str]:
    if key in OPERATOR_PARAMS:
        return list(OPERATOR_PARAMS[key])
    if key in OPS:
        return [p.name for p in OPS[key].params]
    return ["self", "other"]  # a comparison


def _bind(params: list[str], app: Application, key: str) -> dict[str, Any]:
    if app.name == "@":  # the operator, as matmul(input, other)
        return dict(zip(["input", "other"], app.args))
    bound = dict(zip(params, app.args))
    bound.update(app.kwargs)
    if key in OPS:
        for p in OPS[key].params:
            if p.name not in bound and p.default is not REQUIRED:
                bound[p.name] = p.default
    return {p: bound[p] for p in params if p in bound}


def _literal(key: str, param: str) -> bool:
    """dim= and keepdim= stay the plain ints and bools numpy's axis/keepdims expect."""
    op = OPS.get(key)
    return op is not None and any(p.name == param and p.kind in LITERAL_KINDS for p in op.params)


def _count(values: dict[str, Any]) -> int:
    """The number of elements a whole-tensor reduction reduced (elementwise mode only)."""
    return values["__numel__"]


def _base(array: Any) -> str:
    first = next(iter(array.flat))
    name = str(first)
    return name if array.ndim == 0 else name.rsplit("_", array.ndim)[0]
