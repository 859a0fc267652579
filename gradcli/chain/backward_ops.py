"""THE table of what each node of a gradient's own graph computes (`--create-graph`).

derivatives.py says what each operation of the language multiplies the gradient by. With
`--create-graph` torch records the backward formulas themselves as a graph: the nodes are
torch's names for the operations its backward formulas use (MulBackward0 for `grad * other`,
SigmoidBackwardBackward0 for sigmoid's backward `grad * out * (1 - out)`, CosBackward0 for
sin's derivative), plus the forward nodes those formulas read (SigmoidBackward0 is `out`).
Each row gives the node's output as a formula of its inputs, in the order of the node's
`next_functions`; its local derivatives are that formula's partial derivatives (sympy's
`diff`, gradcli/chain/second.py), so one row per node kind is all the table holds.

An input torch did not record (an edge to None: a gradient that depends on no variable,
such as the seed of ones) is a constant: `saved` names the saved tensor that holds its value,
or None when torch saves none (AddBackward0), in which case chain/second.py recovers it from
the node's own value.

tests/chain/test_chain_second.py holds every row against torch's own forward of that node kind
(test_every_backward_op_row_is_torchs_own_node).
Nothing here imports torch or sympy: the callables receive sympy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BackwardOp:
    """`meaning(sp, inputs, node)`: the node's output from its inputs (in edge order) and
    its scalar saved attributes (read from `node`); `saved[i]`: the saved tensor holding
    input i when torch recorded no edge for it (UNUSED: the formula does not read it);
    `through`: the input whose value the node passes on unchanged, if any."""

    meaning: Callable[[Any, list[Any], Any], Any]
    saved: tuple[str | None, ...]
    through: int | None = None


#: An input the node's formula does not read (copy_'s destination).
UNUSED = "unused"


def _number(sp: Any, value: Any) -> Any:
    from ..interpret.to_sympy import symbolic_number

    return symbolic_number(value.item() if hasattr(value, "item") else value)


BACKWARD_OPS: dict[str, BackwardOp] = {
    # backward(create_graph=True) copies the gradient into the variable's .grad: its value is
    # input 1; input 0 is the zeros it was copied over.
    "torch::autograd::CopyBackwards": BackwardOp(lambda sp, a, n: a[1], (UNUSED, None), through=1),
    "AddBackward0": BackwardOp(lambda sp, a, n: a[0] + _number(sp, n._saved_alpha) * a[1], (None, None)),
    "SubBackward0": BackwardOp(lambda sp, a, n: a[0] - _number(sp, n._saved_alpha) * a[1], (None, None)),
    "MulBackward0": BackwardOp(lambda sp, a, n: a[0] * a[1], ("_saved_self", "_saved_other")),
    "MulBackward1": BackwardOp(lambda sp, a, n: a[0] * _number(sp, n._saved_other), (None,)),
    "DivBackward0": BackwardOp(lambda sp, a, n: a[0] / a[1], ("_saved_self", "_saved_other")),
    "NegBackward0": BackwardOp(lambda sp, a, n: -a[0], (None,)),
    "PowBackward0": BackwardOp(lambda sp, a, n: a[0] ** _number(sp, n._saved_exponent), (None,)),
    "SigmoidBackward0": BackwardOp(lambda sp, a, n: 1 / (1 + sp.exp(-a[0])), (None,)),
    "TanhBackward0": BackwardOp(lambda sp, a, n: sp.tanh(a[0]), (None,)),
    "ExpBackward0": BackwardOp(lambda sp, a, n: sp.exp(a[0]), (None,)),
    "LogBackward0": BackwardOp(lambda sp, a, n: sp.log(a[0]), (None,)),
    "SinBackward0": BackwardOp(lambda sp, a, n: sp.sin(a[0]), (None,)),
    "CosBackward0": BackwardOp(lambda sp, a, n: sp.cos(a[0]), (None,)),
    "SqrtBackward0": BackwardOp(lambda sp, a, n: sp.sqrt(a[0]), (None,)),
    "ReciprocalBackward0": BackwardOp(lambda sp, a, n: 1 / a[0], (None,)),
    # The backward of sigmoid's and tanh's backward: inputs (grad_output, output).
    "SigmoidBackwardBackward0": BackwardOp(
        lambda sp, a, n: a[0] * a[1] * (1 - a[1]), ("_saved_grad_output", "_saved_output")
    ),
    "TanhBackwardBackward0": BackwardOp(
        lambda sp, a, n: a[0] * (1 - a[1] ** 2), ("_saved_grad_output", "_saved_output")
    ),
}
