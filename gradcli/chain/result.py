"""The chain rule of one trace as plain data: formulas as text (sympy `str`) and LaTeX,
numbers as nested lists, each beside the value torch's hooks saw."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .. import words
from ..outcome import Problem, sentence

#: How the formulas name tensors: one symbol per tensor read elementwise (a generic element),
#: or one symbol per element (softmax, matmul and reductions over a dim couple elements).
SymbolicMode = Literal["elementwise", "elements"]
#: How a leaf's composed gradient was shown equal to sympy's derivative.
ProofKind = Literal["simplify", "numeric", "differs", "none"]


@dataclass
class Formula:
    """One formula: sympy's `str`, its LaTeX."""

    text: str
    latex: str


@dataclass
class Numbers:
    """A formula's value at the traced values beside the value torch computed there."""

    value: Any
    torch: Any = None  # None when --flow recorded nothing for it
    agrees: bool | None = None


@dataclass
class Edge:
    """One input edge of a node: ∂out/∂input, and the gradient sent along it."""

    index: int  # position in the node's next_functions
    to: str | None  # the node it leads to
    param: str  # the parameter of the operation (self, other, input, ...)
    input: str  # the symbol of the input value
    local: Formula
    gradient: Formula
    uses: list[str]
    numbers: Numbers | None = None
    local_value: Any = None  # the local derivative at the traced values (None for a Jacobian in words)


@dataclass
class Node:
    """A backward node beside the operation that made it."""

    node: str  # graph node id
    name: str  # grad_fn.name()
    op: str  # the operation as written (*, sigmoid, sum)
    symbol: str  # the name of its output value in the formulas
    definition: Formula  # the output as a formula of the inputs
    gradient: str  # the name of the gradient arriving at it
    terms: list[Formula]  # one per path that reaches it
    total: Formula  # their sum
    edges: list[Edge]
    words: str | None = None  # element-coupling operations: the derivative in words
    numbers: Numbers | None = None
    inner: list[str] = field(default_factory=list)  # torch nodes inside this operation (2/x)
    span: Any = None  # where the operation is written in the source (errors.Span)


@dataclass
class LeafGradient:
    """A leaf's gradient: the paths' terms, their composition, sympy's derivative, a proof."""

    variable: str
    node: str | None  # its AccumulateGrad node
    terms: list[Formula]
    composed: Formula  # in named values (see ChainRule.definitions)
    expanded: Formula | None  # in the variables only; None when too long to expand
    reference: Formula | None  # sympy's derivative of the whole expression
    proof: ProofKind
    proof_words: str
    numbers: Numbers | None = None
    # --create-graph: d/dv sum(gradient), beside the second derivative the trace took
    second: Formula | None = None
    second_numbers: Numbers | None = None


@dataclass
class Definition:
    """A named value: a forward value (h = x*u1) or a gradient (g_h = ...)."""

    symbol: str
    formula: Formula


@dataclass
class SecondLeaf:
    """d/dvariable of sum(gradient of `of`): composed along the gradient's graph, proved."""

    variable: str
    terms: list[Formula]
    composed: Formula  # in named values
    expanded: Formula | None  # in the variables (and constants) only
    reference: Formula | None  # sympy's second derivative of the expression
    proof: ProofKind
    proof_words: str
    numbers: Numbers | None = None


@dataclass
class SecondGraph:
    """--create-graph: the gradient of `of`'s own graph, node by node, backpropagating
    sum(gradient) as torch's second backward does. `note` says why it is not written out."""

    of: str
    nodes: list[Node] = field(default_factory=list)
    leaves: list[SecondLeaf] = field(default_factory=list)
    constants: list[Definition] = field(default_factory=list)  # inputs torch did not record
    definitions: list[Definition] = field(default_factory=list)  # the graph's named values
    note: str | None = None


@dataclass
class ChainRule:
    mode: SymbolicMode
    seed: Formula  # the gradient the output starts with
    nodes: list[Node]
    leaves: list[LeafGradient]
    definitions: list[Definition]
    second_graphs: list[SecondGraph] = field(default_factory=list)  # with --create-graph

    @property
    def problems(self) -> list[Problem]:
        """Where the written-out chain rule and torch (or sympy) disagree, as records."""
        found = [Problem("chain-mismatch", node.node, {"name": node.name}) for node in self.nodes
                 if node.numbers is not None and node.numbers.agrees is False
                 or any(e.numbers is not None and e.numbers.agrees is False for e in node.edges)]
        found += [Problem("chain-leaf-mismatch", leaf.variable) for leaf in self.leaves
                  if any(n is not None and n.agrees is False for n in (leaf.numbers, leaf.second_numbers))]
        found += [Problem("chain-proof-failed", leaf.variable) for leaf in self.leaves if leaf.proof == "differs"]
        for graph in self.second_graphs:
            found += [Problem("chain-mismatch", node.node, {"name": node.name}) for node in graph.nodes
                      if node.numbers is not None and node.numbers.agrees is False
                      or any(e.numbers is not None and e.numbers.agrees is False for e in node.edges)]
            found += [Problem("chain-second-failed", leaf.variable, {"of": graph.of}) for leaf in graph.leaves
                      if leaf.proof == "differs" or leaf.numbers is not None and leaf.numbers.agrees is False]
        return found


@sentence("chain-mismatch")
def _chain_mismatch(p: Problem) -> str:
    return words.chain_mismatch(p.subject, p.detail["name"])


@sentence("chain-leaf-mismatch")
def _chain_leaf_mismatch(p: Problem) -> str:
    return words.chain_leaf_mismatch(p.subject)


@sentence("chain-proof-failed")
def _chain_proof_failed(p: Problem) -> str:
    return words.chain_proof_failed(p.subject)


@sentence("chain-second-failed")
def _chain_second_failed(p: Problem) -> str:
    return words.chain_second_failed(p.detail["of"], p.subject)
