"""compare's evidence functions (gradcli/comparison/causes.py, locate.py) on what torch gives
them, at the edges a whole compare run rarely reaches: a module one side saw no gradient at, a
comparison with no parameter left to measure, two causes found together, a first layer whose
gradient is missing. The numbers are torch's (its float16 and bfloat16 rounding, its norms),
computed here."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from gradcli.comparison.causes import FP16_TINY, _agreement, _underflow, find_causes
from gradcli.comparison.gradients import UNIT_ROUNDOFF, Flag, compare_gradient
from gradcli.comparison.locate import locate
from gradcli.comparison.result import Cause, Divergence
from gradcli.comparison.side import ModuleSeen


def _side(modules: dict[str, ModuleSeen], grads: dict | None = None) -> SimpleNamespace:
    return SimpleNamespace(modules=modules, grads=grads or {}, loss_dtype="float16")


def _norm_err(reference: torch.Tensor, candidate: torch.Tensor) -> float:
    ref, cand = reference.double(), candidate.double()
    return float(torch.linalg.vector_norm(cand - ref) / torch.linalg.vector_norm(ref))


def test_underflow_skips_a_module_one_side_saw_no_gradient_at_and_measures_the_others():
    """Modules whose output gradients cannot be compared (one side has none, the shapes differ,
    none has elements) are passed over; the one whose float16 copy torch flushed is measured."""
    ref = torch.full((64,), 1e-6)
    ref[:4] = torch.tensor([1e-8, 2e-8, -3e-8, 5e-9])
    cand = ref.half().float()  # torch's float16 rounding: half of 2^-24 and below is zero
    lost = ref[(cand == 0) & (ref != 0)]
    assert lost.numel() > 0 and float(lost.abs().min()) > 1e-3 * float(ref.abs().max())  # above the noise
    reference = _side({"a": ModuleSeen("a", "Linear", output_grad=torch.ones(3)),
                       "b": ModuleSeen("b", "Linear", output_grad=torch.ones(3)),
                       "c": ModuleSeen("c", "Linear", output_grad=torch.ones(0)),
                       "d": ModuleSeen("d", "Linear", output_grad=ref)})
    candidate = _side({"a": ModuleSeen("a", "Linear", output_grad=None),
                       "b": ModuleSeen("b", "Linear", output_grad=torch.ones(4)),
                       "c": ModuleSeen("c", "Linear", output_grad=torch.ones(0)),
                       "d": ModuleSeen("d", "Linear", output_grad=cand)})
    runs = SimpleNamespace(module_tolerance=lambda path: 1e-3, tolerance=lambda name: 1e-3)
    result = SimpleNamespace(parameters=[], scaler_steps=[])
    (cause,) = _underflow(runs, result, reference, candidate)
    smallest = float(lost.double().abs().min())
    scale = cause.detail["scale"]
    assert cause.kind == "underflow" and cause.detail["smallest_lost"] == smallest
    assert math.log2(scale).is_integer() and smallest * scale >= torch.finfo(torch.float16).tiny > smallest * scale / 2
    assert cause.detail["largest"] == float(ref.double().abs().max()) and FP16_TINY == torch.finfo(torch.float16).tiny


def test_agreement_with_no_parameter_measured_is_disagreement_with_a_worst_error_of_zero():
    """Every gradient missing on the candidate (torch gave it none): nothing agrees, and there is no
    relative error to take the worst of."""
    compared = [compare_gradient("w", torch.ones(2), None, 1e-3), compare_gradient("b", torch.ones(1), None, 1e-3)]
    assert all(p.flags == [Flag.MISSING] and p.rel_err is None for p in compared)
    runs = SimpleNamespace(judge=lambda reference, candidate: compared)
    assert _agreement(runs, None, None) == (False, 0.0)


def test_an_amplifying_module_and_a_bfloat16_reduction_are_both_causes():
    """Under bfloat16 the module's own backward amplifies an agreeing gradient and a long sum's
    rounding explains a parameter's difference: find_causes keeps both."""
    torch.manual_seed(0)
    into = torch.randn(256)
    into_half = into.bfloat16().float()  # torch's rounding: agrees within the tolerance
    out = torch.randn(256)
    out_half = out + 0.05 * torch.randn(256)  # the module's backward made it 20 times worse or more
    before, after = _norm_err(into, into_half), _norm_err(out, out_half)
    tolerance = 16 * UNIT_ROUNDOFF[torch.bfloat16]
    assert 0 < before <= tolerance and after >= 4 * before
    weight = torch.randn(4096)
    row = compare_gradient("fc.weight", weight, weight.bfloat16().float(), 1e-6)
    u, n = UNIT_ROUNDOFF[torch.bfloat16], 4096
    assert row.flags == [Flag.DIFFERS] and row.rel_err <= u * n
    reference = _side({"bn": ModuleSeen("bn", "BatchNorm1d", output_grad=into, input_grad=out)})
    candidate = _side({"bn": ModuleSeen("bn", "BatchNorm1d", output_grad=into_half, input_grad=out_half)})
    divergence = Divergence("bn", "BatchNorm1d", after, tolerance, 0.0, False)
    setup = SimpleNamespace(compile=False, precision="bfloat16", scaler=False)
    result = SimpleNamespace(setup=setup, parameters=[row], first_divergence=divergence, scaler_steps=[])
    runs = SimpleNamespace(reduction=lambda name: n)
    causes = find_causes(runs, result, reference, candidate)
    assert causes == [
        Cause("amplified", {"module": "bn (BatchNorm1d)", "output_grad_rel_err": before, "input_grad_rel_err": after,
                            "factor": after / before}),
        Cause("bfloat16-reduction", {"parameters": [{"name": "fc.weight", "reduction": n, "rel_err": row.rel_err,
                                                     "bound": u * n}], "unit_roundoff": u}),
    ]


def test_a_first_layer_whose_gradient_the_candidate_lacks_is_where_the_difference_starts():
    """The first layer's weight has no gradient on the candidate (MISSING, no error to measure), its
    input takes none, its forward is torch's same output: the divergence is there, with an error
    of 0, its own tolerance (not another module's), and no line when its origin is unknown."""
    torch.manual_seed(0)
    h, y = torch.randn(4, 3), torch.randn(4, 2)
    reference = _side({"fc": ModuleSeen("fc", "Linear", output=h, origin=None),
                       "head": ModuleSeen("head", "Linear", output=y, input_grad=torch.ones(4, 3), origin=None)})
    candidate = _side({"fc": ModuleSeen("fc", "Linear", output=h.clone()),
                       "head": ModuleSeen("head", "Linear", output=y.clone(), input_grad=torch.ones(4, 3))})
    parameters = [compare_gradient("fc.weight", torch.ones(3, 3), None, 1e-3),
                  compare_gradient("head.weight", torch.ones(2, 3), torch.ones(2, 3), 1e-2)]
    tolerances = {"fc": 1e-3, "head": 1e-2}
    d = locate(reference, candidate, tolerances.__getitem__, parameters, {"fc.weight": "fc", "head.weight": "head"})
    assert d == Divergence(module="fc", module_class="Linear", grad_rel_err=0.0, tolerance=1e-3, forward_rel_err=0.0,
                           forward_differs=False, first_forward=None, file=None, line=None, code=None)
