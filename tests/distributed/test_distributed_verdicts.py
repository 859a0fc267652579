"""The distributed verdicts (gradcli/distributed/judge.py and causes.py) on gradients torch
computes in this one process the way N ranks would: each rank's shard of the batch through a
copy of the model with the same weights, then the mean of the ranks' gradients (what DDP's
all-reduce hands every rank), against the one process on the whole batch. No rank is spawned,
so these run in well under a second each; tests/distributed/test_distributed.py runs the real ranks.
"""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch
from torch import nn

from gradcli.comparison.gradients import Flag
from gradcli.distributed.causes import prove, suspects
from gradcli.distributed.judge import judge
from gradcli.distributed.reference import Reference
from gradcli.distributed.result import CauseKind, Comparison, DistributedResult
from gradcli.distributed.setup import Fix, Setup
from gradcli.targets.spec import ModelSpec
from gradcli.distributed.step import StepEffect
from gradcli.distributed.worker import RankRun
from gradcli.words import problem_sentences, short_number

WORLD = 2


class MLP(nn.Module):
    def __init__(self, norm: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.norm = nn.BatchNorm1d(8) if norm else nn.Identity()
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.norm(self.fc1(x))))


def mean_loss(out):
    return out.pow(2).mean()


def sum_loss(out):
    return out.pow(2).sum()


def made(norm: bool = False, batch: int = 8):
    torch.manual_seed(0)
    return MLP(norm), torch.randn(batch, 6)


def grads_of(model, x, loss, dtype=torch.float32):
    """torch's gradients of loss(model(x)) on a copy of the model, and the loss."""
    work = copy.deepcopy(model).to(dtype)
    value = loss(work(x.to(dtype)))
    names = [n for n, _ in work.named_parameters()]
    return dict(zip(names, torch.autograd.grad(value, list(work.parameters()), allow_unused=True))), float(value.detach())


def reference(model, x, loss, step: StepEffect | None = None, dtype=torch.float32) -> Reference:
    """The one process on the whole batch, as distributed/reference.py measures it: gradients,
    their norm and each one's rounding in `dtype` against float64."""
    grads, value = grads_of(model, x, loss, dtype)
    exact, _ = grads_of(model, x, loss, torch.float64)
    noise = {n: float((g.double() - exact[n]).norm()) / float(exact[n].norm()) for n, g in grads.items()
             if g is not None and float(exact[n].norm())}
    norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads.values() if g is not None))
    numels = {n: p.numel() for n, p in model.named_parameters()}
    return Reference(grads, value, norm, "test", "test", x.shape[0], dtype, 0, type(model).__name__, noise, step,
                     numels)


def rank(r: int, grads: dict, loss: float = 0.0, **fields) -> RankRun:
    blob = io.BytesIO()
    torch.save(grads, blob)
    norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads.values() if g is not None))
    fields.setdefault("init_digest", "same")
    return RankRun(r, loss, blob.getvalue(), norm, norm, **fields)


def all_reduced(model, x, loss, micro: int = 1, dtype=torch.float32, **fields) -> list[RankRun]:
    """Every rank's gradient after DDP's all-reduce: the mean over ranks of each shard's
    gradient, a shard run as `micro` micro-batches whose gradients add up (accumulation)."""
    per_rank = []
    for shard in x.chunk(WORLD):
        parts = [grads_of(model, part, loss, dtype)[0] for part in shard.chunk(micro)]
        per_rank.append({n: None if parts[0][n] is None else sum(p[n] for p in parts) for n in parts[0]})
    mean = {n: None if per_rank[0][n] is None else torch.stack([g[n] for g in per_rank]).mean(0) for n in per_rank[0]}
    return [rank(r, mean, **fields) for r in range(WORLD)]


def rel(a, b) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def test_a_mean_loss_reduced_by_the_mean_agrees_and_suspects_nothing():
    model, x = made()
    ref = reference(model, x, mean_loss)
    run = judge(ref, all_reduced(model, x, mean_loss))
    assert run.clean and not run.differing and not run.unsynced
    for row in run.rows:
        assert row.spread == 0.0 and row.scale == pytest.approx(1.0, rel=1e-5)
    assert suspects(run, Setup(ModelSpec("t.py:MLP"))) == []


def test_a_sum_loss_is_the_reference_over_n_and_only_that_cause_is_suspected():
    model, x = made()
    ref = reference(model, x, sum_loss)
    runs = all_reduced(model, x, sum_loss)
    got = runs[0].gradients()
    truth = {n: float(got[n].double().flatten() @ g.double().flatten()) / float(g.double().pow(2).sum())
             for n, g in ref.gradients.items()}
    assert all(t == pytest.approx(1 / WORLD, rel=1e-5) for t in truth.values()), "the premise: DDP's mean of sums"
    run = judge(ref, runs)
    assert {r.name for r in run.differing} == set(ref.gradients) and not run.unsynced
    assert [r.scale for r in run.rows] == pytest.approx(list(truth.values()), rel=1e-9)
    (cause,) = suspects(run, Setup(ModelSpec("t.py:MLP")))
    assert cause.kind is CauseKind.SUM_LOSS and cause.fix is Fix.SCALE_LOSS and cause.subjects == list(ref.gradients)
    assert cause.evidence["expected_ratio"] == 1 / WORLD
    assert cause.evidence["ratios"] == pytest.approx(truth, rel=1e-9)
    assert cause.evidence["max_residual"] <= 1e-4
    # accumulate 2 is not the cause here: the ratio is 1/N, not K
    assert [c.kind for c in suspects(run, Setup(ModelSpec("t.py:MLP"), accumulate=2))] == [CauseKind.SUM_LOSS]


def test_accumulating_mean_losses_is_k_times_the_reference():
    model, x = made()
    ref = reference(model, x, mean_loss)
    runs = all_reduced(model, x, mean_loss, micro=2)
    got = runs[0].gradients()
    assert all(rel(got[n], 2 * g) < 1e-5 for n, g in ref.gradients.items()), "the premise: K micro-means add up"
    run = judge(ref, runs)
    assert len(run.differing) == len(ref.gradients)
    (cause,) = suspects(run, Setup(ModelSpec("t.py:MLP"), accumulate=2))
    assert cause.kind is CauseKind.ACCUMULATION and cause.fix is Fix.DIVIDE_BY_STEPS and cause.subjects == list(ref.gradients)
    assert cause.evidence["steps"] == 2 and cause.evidence["expected_ratio"] == 2.0
    # without --accumulate the same gradients point at nothing: 2 is not 1/N
    assert suspects(run, Setup(ModelSpec("t.py:MLP"))) == []


def test_batchnorm_per_shard_differs_and_names_the_layer():
    model, x = made(norm=True)
    ref = reference(model, x, mean_loss)
    runs = all_reduced(model, x, mean_loss, batchnorms=["norm"])
    got = runs[0].gradients()
    exact, _ = grads_of(model, x, mean_loss, torch.float64)
    # fc1's bias before the BatchNorm is 0 in exact arithmetic (rounding on both sides): left out
    off = {n for n, g in ref.gradients.items() if rel(got[n], g) > 1e-3 and float(exact[n].norm()) > 1e-12}
    assert "fc1.weight" in off and "fc1.bias" not in off, "the premise: shard statistics move the first layer's gradient"
    run = judge(ref, runs)
    assert {r.name for r in run.differing} == off
    worst = max(rel(got[n], ref.gradients[n]) for n in off)
    (cause,) = suspects(run, Setup(ModelSpec("t.py:MLP")))
    assert cause.kind is CauseKind.BATCHNORM and cause.subjects == ["norm"] and cause.fix is Fix.SYNC_BATCHNORM
    assert cause.evidence["differing"] == [r.name for r in run.rows if r.name in off]
    assert cause.evidence["max_rel_err"] == pytest.approx(worst, rel=1e-6)
    # the same gradients without a BatchNorm named suspect nothing (not a scale either)
    no_norm = judge(ref, all_reduced(model, x, mean_loss))
    assert suspects(no_norm, Setup(ModelSpec("t.py:MLP"))) == []


def test_ranks_that_hold_different_gradients_are_unsynchronised():
    """No all-reduce: each rank keeps its own shard's gradient. Their spread is torch's
    ‖g_1 − g_0‖/‖g_0‖, far over tolerance."""
    model, x = made()
    ref = reference(model, x, mean_loss)
    shards = [grads_of(model, s, mean_loss)[0] for s in x.chunk(WORLD)]
    run = judge(ref, [rank(r, g) for r, g in enumerate(shards)])
    assert {r.name for r in run.unsynced} == set(ref.gradients) and not run.clean
    for row in run.rows:
        assert row.spread == pytest.approx(rel(shards[1][row.name], shards[0][row.name]), rel=1e-9)
        assert not row.synced
    result = DistributedResult("t", "t", "MLP", 0, "ddp", WORLD, "gloo", 8, ref.loss, run)
    assert not result.ok
    kinds = [p.kind for p in result.problems]
    assert kinds.count("unsynchronised") == len(ref.gradients)


def test_initial_weights_that_differ_are_suspected_only_when_the_gradients_differ():
    model, x = made()
    ref = reference(model, x, mean_loss)
    agreeing = judge(ref, [rank(r, grads_of(model, x, mean_loss)[0], init_digest=str(r)) for r in range(WORLD)])
    assert agreeing.clean and suspects(agreeing, Setup(ModelSpec("t.py:MLP"))) == []  # DDP broadcasts rank 0's
    torch.manual_seed(1)
    other = MLP()
    runs = [rank(0, grads_of(model, x, mean_loss)[0], init_digest="a"),
            rank(1, grads_of(other, x, mean_loss)[0], init_digest="b")]
    run = judge(ref, runs)
    assert run.unsynced
    (cause,) = suspects(run, Setup(ModelSpec("t.py:MLP")))
    assert cause.kind is CauseKind.INITIAL_WEIGHTS and cause.evidence == {"fingerprints": ["a", "b"]} and cause.subjects == []


class Gated(nn.Module):
    """`aux` runs only when the batch's first column is all positive."""

    def __init__(self):
        super().__init__()
        self.fc, self.aux = nn.Linear(6, 3), nn.Linear(6, 3)

    def forward(self, x):
        out = self.fc(x)
        return out + self.aux(x) if bool((x[:, 0] > 0).all()) else out


def gated(first_half_positive: bool):
    torch.manual_seed(0)
    model, x = Gated(), torch.randn(8, 6)
    x[:, 0] = -x[:, 0].abs() - 0.1
    if first_half_positive:
        x[:4, 0] = -x[:4, 0]
    return model, x


def test_a_parameter_unused_on_one_rank_only_would_hang():
    """torch gives `aux` a gradient on rank 0's shard and none on rank 1's: DDP would wait for
    it on rank 1 forever, so the worker does not start the run (`skipped`)."""
    model, x = gated(first_half_positive=True)
    per_rank = [grads_of(model, s, mean_loss)[0] for s in x.chunk(WORLD)]
    no_grad = [[n for n, g in grads.items() if g is None] for grads in per_rank]
    assert no_grad == [[], ["aux.weight", "aux.bias"]], "the premise"
    ref = reference(model, x, mean_loss)
    nothing = {n: None for n in ref.gradients}
    runs = [rank(r, nothing, no_grad=names, skipped="unused-on-some-ranks") for r, names in enumerate(no_grad)]
    run = judge(ref, runs)
    assert not run.clean
    (cause,) = suspects(run, Setup(ModelSpec("t.py:Gated")))
    assert cause.kind is CauseKind.UNUSED and cause.fix is Fix.FIND_UNUSED
    assert cause.subjects == ["aux.bias", "aux.weight"]
    assert cause.evidence["no_grad_by_rank"] == {"1": ["aux.weight", "aux.bias"]}
    assert cause.evidence["unused_on_every_rank"] == [] and cause.evidence["would_hang"] is True
    assert cause.evidence["ddp_error"] is None and cause.evidence["unsynchronised"] == []
    result = DistributedResult("t", "t", "Gated", 0, "ddp", WORLD, "gloo", 8, ref.loss, run)
    assert [p.kind for p in result.problems] == ["would-hang"] and not result.ok


def test_a_parameter_no_rank_uses_is_no_grad_and_agrees():
    model, x = gated(first_half_positive=False)
    ref = reference(model, x, mean_loss)
    assert ref.gradients["aux.weight"] is None and ref.gradients["aux.bias"] is None, "the premise"
    runs = all_reduced_without(model, x, ["aux.weight", "aux.bias"])
    run = judge(ref, runs)
    for name in ("aux.weight", "aux.bias"):
        row = next(r for r in run.rows if r.name == name)
        assert row.no_grad and row.agrees and row.spread is None and row.scale is None
        assert row.per_rank[0].flags == [Flag.MISSING] and row.numel == dict(model.named_parameters())[name].numel()
    assert run.clean and suspects(run, Setup(ModelSpec("t.py:Gated"))) == []
    # the same parameter unused everywhere, with DDP's error on its next forward: suspected
    said = "Expected to have finished reduction in the prior iteration before starting a new one."
    erred = judge(ref, all_reduced_without(model, x, ["aux.weight", "aux.bias"], ddp_error=said + "\nmore"))
    (cause,) = suspects(erred, Setup(ModelSpec("t.py:Gated")))
    assert cause.kind is CauseKind.UNUSED and cause.evidence["ddp_error"] == said
    assert cause.evidence["unused_on_every_rank"] == ["aux.bias", "aux.weight"] and cause.evidence["would_hang"] is False
    result = DistributedResult("t", "t", "Gated", 0, "ddp", WORLD, "gloo", 8, ref.loss, erred)
    assert problem_sentences(result.problems) == [f"DDP raised: {said}"]


def all_reduced_without(model, x, unused, **fields):
    """all_reduced, with each rank's list of the parameters it gave no gradient."""
    runs = all_reduced(model, x, mean_loss, **fields)
    for run in runs:
        run.no_grad = list(unused)
    return runs


@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_a_gradient_zero_up_to_rounding_agrees_against_the_whole_gradient(scale):
    """fc1's bias before a BatchNorm has gradient 0 in exact arithmetic (the mean is taken
    out): torch's float32 value is rounding, far from float64's in relative terms. The
    rounding grows with the whole gradient (a loss 1e4 times larger): so does the floor."""
    torch.manual_seed(0)
    model, x = MLP(norm=True), torch.randn(8, 6)

    def loss(out):
        return mean_loss(out) * scale

    ref = reference(model, x, loss)
    exact, _ = grads_of(model, x, loss, torch.float64)
    bias = ref.gradients["fc1.bias"]
    assert float(exact["fc1.bias"].norm()) < 1e-15 * ref.norm and float(bias.norm()) < 1e-6 * ref.norm, "the premise"
    noisy = {n: g.clone() for n, g in ref.gradients.items()}
    noisy["fc1.bias"] = -bias  # another rounding: as far off relatively as it gets
    run = judge(ref, [rank(r, noisy) for r in range(WORLD)])
    row = next(r for r in run.rows if r.name == "fc1.bias")
    assert row.per_rank[0].rel_err == pytest.approx(2.0) and row.agrees
    # a gradient of that size that is not rounding next to the whole gradient differs
    big = {n: g.clone() for n, g in ref.gradients.items()}
    big["fc1.bias"] = torch.full_like(bias, ref.norm)
    row = next(r for r in judge(ref, [rank(r, big) for r in range(WORLD)]).rows if r.name == "fc1.bias")
    assert not row.agrees


def _norm(grads: dict) -> float:
    """The L2 norm of all these gradients together, in float64."""
    return math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads.values()))


def _clipped(grads: dict, limit: float) -> tuple[dict, StepEffect]:
    """torch's clip_grad_norm_ over these gradients, and what it did (factor, norm before)."""
    leaves = {n: torch.zeros_like(g, requires_grad=True) for n, g in grads.items()}
    for n, leaf in leaves.items():
        leaf.grad = grads[n].clone()
    before = _norm(grads)
    torch.nn.utils.clip_grad_norm_(list(leaves.values()), limit)
    after = {n: leaf.grad for n, leaf in leaves.items()}
    factor = float(next(iter(after.values())).double().flatten()[0] / next(iter(grads.values())).double().flatten()[0])
    return after, StepEffect(factor, 0.0, before)


def _clipped_reference(model, x, loss, grads: dict, limit: float):
    """The one-process reference whose step clipped `grads` to `limit` with torch's clip_grad_norm_."""
    after, step = _clipped(grads, limit)
    ref = reference(model, x, loss, step=step)
    ref.gradients = after
    return ref


def _times(loss, scale: float):
    """`loss` multiplied by `scale` (gradients of 1e-3 make clip_grad_norm_'s eps of 1e-6 count)."""
    return lambda out: loss(out) * scale


@pytest.mark.parametrize("scale", [1.0, 1e-3])
def test_clipping_each_shard_by_its_own_norm_is_found_with_the_maximum(scale):
    """FSDP2: each rank holds half of every gradient (rows) and clip_grad_norm_ on its local
    shard clips by the shard's norm; one process clips the whole gradient. With gradients of
    1e-3, the maximum is found only with torch's eps (factor max/(norm + 1e-6)) as it is."""
    model, x = made()
    loss = _times(mean_loss, scale)
    whole, _ = grads_of(model, x, loss)
    limit = 0.5 * _norm(whole)
    ref_after, ref_step = _clipped(whole, limit)
    ref = reference(model, x, loss, step=ref_step)
    ref.gradients = ref_after
    shards = [{n: g.chunk(WORLD)[r] for n, g in whole.items()} for r in range(WORLD)]
    clipped = [_clipped(s, limit) for s in shards]
    assert all(step.factor < 1 for _, step in clipped), "the premise: every shard is over the maximum"
    assert abs(clipped[0][1].factor - clipped[1][1].factor) > 1e-3, "the premise: the shards' norms differ"
    gathered = {n: torch.cat([c[0][n] for c in clipped]) for n in whole}
    runs = [rank(r, gathered, step=clipped[r][1]) for r in range(WORLD)]
    run = judge(ref, runs)
    assert run.differing
    causes = suspects(run, Setup(ModelSpec("t.py:MLP"), wrap="fsdp", clip=limit), ref.step)
    (cause,) = [c for c in causes if c.kind is CauseKind.CLIP_ON_SHARDS]
    assert cause.fix is Fix.CLIP_WHOLE and cause.subjects == list(whole)
    assert cause.evidence == {"max_norm": pytest.approx(limit, rel=1e-5), "factors": [c[1].factor for c in clipped],
                              "shard_norms": [c[1].norm_before for c in clipped], "reference_factor": ref_step.factor,
                              "whole_norm": ref_step.norm_before}
    # clipped by the whole gradient on every rank (the fix), nothing differs to explain
    fixed = judge(ref, [rank(r, ref_after, step=ref_step) for r in range(WORLD)])
    assert suspects(fixed, Setup(ModelSpec("t.py:MLP"), wrap="fsdp", clip=limit), ref.step) == []


def test_a_cause_is_proven_by_the_rerun_that_agrees_and_together_when_none_alone_does():
    model, x = made()
    ref = reference(model, x, sum_loss)
    wrong = judge(ref, all_reduced(model, x, sum_loss))
    right = judge(reference(model, x, mean_loss), all_reduced(model, x, mean_loss))
    assert right.clean and not wrong.clean
    causes = suspects(wrong, Setup(ModelSpec("t.py:MLP")))
    prove(causes, lambda fixing: right)
    assert causes[0].proven is True and causes[0].after == right.summary()
    causes = suspects(wrong, Setup(ModelSpec("t.py:MLP")))
    prove(causes, lambda fixing: wrong)
    assert causes[0].proven is False and causes[0].after["differing"] == [r.name for r in wrong.differing]
    # two causes, neither alone enough: both are rerun together and proven together
    two = suspects(Comparison(wrong.rows, wrong.norms, wrong.losses, wrong.no_grad, init_digests=["a", "b"]),
                   Setup(ModelSpec("t.py:MLP")))
    assert [c.kind for c in two] == [CauseKind.INITIAL_WEIGHTS, CauseKind.SUM_LOSS]
    prove(two, lambda fixing: right if len(fixing) == 2 else wrong)
    assert all(c.proven for c in two)
    assert two[0].after["together_with"] == [Fix.BROADCAST.value, Fix.SCALE_LOSS.value]


def test_the_problems_say_which_rank_and_how_far():
    model, x = made()
    ref = reference(model, x, sum_loss)
    runs = all_reduced(model, x, sum_loss)
    got = runs[0].gradients()
    result = DistributedResult("t", "t", "MLP", 0, "ddp", WORLD, "gloo", 8, ref.loss, judge(ref, runs))
    sentences = problem_sentences(result.problems)
    assert len(sentences) == len(ref.gradients) and not result.ok
    for name, sentence in zip(ref.gradients, sentences):
        truth = rel(got[name], ref.gradients[name])  # 1/2 of the reference: off by a half
        assert truth == pytest.approx(0.5, rel=1e-4)
        assert sentence.startswith(f"{name}: the reduced gradient differs from one process's (rank 0: rel err {short_number(truth)}, ")


def test_half_the_reference_plus_something_else_is_not_a_sum_loss_alone():
    """g = g_ref/N + e with e orthogonal to g_ref: torch's least-squares scale is exactly 1/N,
    yet ‖e‖/‖g_ref‖ = 1e-2 is left over, far above rounding: not the sum loss's signature.
    Nor is a scale 2e-4 off 1/N, beyond rounding of the ratio."""
    model, x = made()
    ref = reference(model, x, mean_loss)
    off = {}
    for n, g in ref.gradients.items():
        noise = torch.randn_like(g)
        flat, base = noise.flatten().double(), g.flatten().double()
        noise = (flat - (flat @ base) / (base @ base) * base).reshape(g.shape)
        off[n] = (g.double() / WORLD + noise * (1e-2 * float(g.norm()) / float(noise.norm()))).float()
        scale = float(off[n].double().flatten() @ base) / float(base @ base)
        assert scale == pytest.approx(1 / WORLD, rel=1e-5), "the premise: the scale is 1/N"
    run = judge(ref, [rank(r, off) for r in range(WORLD)])
    assert len(run.differing) == len(ref.gradients)
    assert suspects(run, Setup(ModelSpec("t.py:MLP"))) == []
    near = {n: g * (1 / WORLD) * (1 + 2e-4) for n, g in ref.gradients.items()}
    assert suspects(judge(ref, [rank(r, near) for r in range(WORLD)]), Setup(ModelSpec("t.py:MLP"))) == []


def test_a_scale_just_off_one_is_not_accumulation_of_one_step():
    """Gradients 1.00005 times the reference (torch multiplies them): they differ, by a scale,
    but with one micro-step there is no accumulation to blame."""
    model, x = made()
    ref = reference(model, x, mean_loss)
    run = judge(ref, [rank(r, {n: g * 1.00005 for n, g in ref.gradients.items()}) for r in range(WORLD)])
    assert run.differing
    assert suspects(run, Setup(ModelSpec("t.py:MLP"), accumulate=1)) == []


def test_the_document_holds_torchs_norms_losses_and_every_parameter():
    """The run's document: the gradient norms (the reference's, each rank's reduced and per
    shard), each rank's loss, the bytes reduced, and a row per parameter with its elements;
    a gradient the ranks have and the reference has not is MISSING, not an agreeing no-grad."""
    model, x = made()
    ref = reference(model, x, mean_loss)
    shards = [grads_of(model, s, mean_loss) for s in x.chunk(WORLD)]
    mean = {n: torch.stack([g[n] for g, _ in shards]).mean(0) for n in ref.gradients}
    norm = _norm(mean)
    runs = [RankRun(r, loss, rank(r, mean).blob, norm, norm / (r + 2), init_digest="same", bytes_reduced=4 * 131)
            for r, (_, loss) in enumerate(shards)]
    result = DistributedResult("t", "t", "MLP", 0, "ddp", WORLD, "gloo", 8, ref.loss, judge(ref, runs))
    document = result.as_dict()
    truth = _norm(grads_of(model, x, mean_loss)[0])
    assert document["grad_norm"] == {"reference": pytest.approx(truth, rel=1e-6), "reduced": [norm, norm],
                                     "per_shard": [norm / 2, norm / 3]}
    assert document["losses"] == [loss for _, loss in shards] and document["bytes_reduced_per_step"] == 4 * 131
    assert [(p["name"], p["numel"]) for p in document["parameters"]] == [(n, p.numel()) for n, p in model.named_parameters()]
    for p in document["parameters"]:
        assert [r["name"] for r in p["ranks"]] == [p["name"]] * WORLD
        assert p["spread"] == 0.0 and p["scale"] == pytest.approx(1.0, rel=1e-5)
    # the reference without fc2.bias's gradient, the ranks with it
    ref.gradients["fc2.bias"] = None
    row = next(r for r in judge(ref, runs).rows if r.name == "fc2.bias")
    assert not row.no_grad and not row.agrees and row.per_rank[0].flags == [Flag.MISSING]
    # no gradient anywhere: a no-grad row, with the tolerance of its neighbours
    runs_without = [rank(r, {**mean, "fc2.bias": None}) for r in range(WORLD)]
    row = next(r for r in judge(ref, runs_without).rows if r.name == "fc2.bias")
    assert row.no_grad and row.agrees and row.numel == 3 and row.per_rank[0].tolerance == row.tolerance
    assert row.per_rank[0].name == "fc2.bias"


def test_a_gradient_exactly_zero_everywhere_agrees_with_no_spread_and_no_scale():
    """tanh saturated at -1 (float32's tanh(-100) is exactly -1, so 1 - tanh² is 0): torch
    gives fc1 an all-zero gradient on the whole batch and on each shard."""
    model, x = made()
    with torch.no_grad():
        model.fc1.bias.fill_(-100.0)
    ref = reference(model, x, mean_loss)
    runs = all_reduced(model, x, mean_loss)
    got = runs[0].gradients()
    assert all(float(g.abs().max()) == 0.0 for g in (ref.gradients["fc1.weight"], got["fc1.weight"])), "the premise"
    run = judge(ref, runs)
    row = next(r for r in run.rows if r.name == "fc1.weight")
    assert row.agrees and row.spread == 0.0 and row.scale is None
    assert run.clean


def _fsdp_ranks(grads: dict, limit: float, by_shard: bool) -> tuple[dict, list[RankRun]]:
    """FSDP2's ranks: each holds a row-half of every gradient; the step clips by the shard's own
    norm (`by_shard`) or by the whole gradient's (torch's clip_grad_norm_ over the DTensors)."""
    shards = [{n: g.chunk(WORLD)[r] for n, g in grads.items()} for r in range(WORLD)]
    if by_shard:
        clipped = [_clipped(sh, limit) for sh in shards]
    else:
        whole, step = _clipped(grads, limit)
        clipped = [({n: g.chunk(WORLD)[r] for n, g in whole.items()},
                    StepEffect(step.factor, 0.0, _norm(sh)))
                   for r, sh in enumerate(shards)]
    gathered = {n: torch.cat([c[0][n] for c in clipped]) for n in grads}
    return gathered, [rank(r, gathered, step=clipped[r][1]) for r in range(WORLD)]


@pytest.mark.parametrize("scale", [1.0, 1e-4])
def test_clipping_the_whole_gradient_of_a_sum_loss_is_not_blamed_on_the_shards(scale):
    """A sum loss (ranks at 1/N of the reference) clipped by the whole gradient's norm: every
    rank's factor is the one that takes the whole norm to the maximum, so the step is not
    where they differ; the sum loss is. The shards' maxima disagree as much for gradients of
    1e-4 (relative to the maximum, not absolutely)."""
    model, x = made()
    loss = _times(sum_loss, scale)
    whole_ref, _ = grads_of(model, x, loss)
    limit = 0.25 * _norm(whole_ref)
    ref = _clipped_reference(model, x, loss, whole_ref, limit)
    reduced = {n: g / WORLD for n, g in whole_ref.items()}
    _, runs = _fsdp_ranks(reduced, limit, by_shard=False)
    run = judge(ref, runs)
    kinds = [c.kind for c in suspects(run, Setup(ModelSpec("t.py:MLP"), wrap="fsdp", clip=limit), ref.step)]
    assert CauseKind.CLIP_ON_SHARDS not in kinds


def test_a_shard_under_the_maximum_is_left_alone_when_clipping_by_shards():
    """The maximum between the two shards' norms: torch's clip_grad_norm_ clips the larger
    shard and leaves the smaller (factor 1); still each shard's own norm decided it."""
    model, x = made()
    whole, _ = grads_of(model, x, mean_loss)
    shards = [{n: g.chunk(WORLD)[r] for n, g in whole.items()} for r in range(WORLD)]
    norms = [_norm(shard) for shard in shards]
    assert abs(norms[0] - norms[1]) > 1e-3 * max(norms), "the premise: the shards' norms differ"
    limit = (norms[0] + norms[1]) / 2
    ref = _clipped_reference(model, x, mean_loss, whole, limit)
    _, runs = _fsdp_ranks(whole, limit, by_shard=True)
    factors = [r.step.factor for r in runs]
    assert sorted(f < 1 for f in factors) == [False, True] and max(factors) == 1.0, "the premise"
    run = judge(ref, runs)
    (cause,) = [c for c in suspects(run, Setup(ModelSpec("t.py:MLP"), wrap="fsdp", clip=limit), ref.step)
                if c.kind is CauseKind.CLIP_ON_SHARDS]
    assert cause.evidence["max_norm"] == pytest.approx(limit, rel=1e-5)
    # a shard over the maximum left alone is not clipping by shards
    runs[factors.index(1.0)].step = StepEffect(1.0, 0.0, 2 * limit)
    assert CauseKind.CLIP_ON_SHARDS not in [c.kind for c in suspects(judge(ref, runs), Setup(ModelSpec("t.py:MLP"), wrap="fsdp", clip=limit), ref.step)]


def test_one_rank_under_torchrun_is_the_one_process_with_no_spread():
    """torchrun --nproc-per-node 1: the only rank's shard is the whole batch, so torch gives it
    the reference's gradients; there is no other rank to differ from (spread 0, not unsynced)."""
    model, x = made(norm=True)
    ref = reference(model, x, mean_loss)
    only = grads_of(model, x, mean_loss)[0]
    assert all(rel(only[n], g) == 0.0 for n, g in ref.gradients.items()), "the premise: the same computation"
    run = judge(ref, [rank(0, only, batchnorms=["norm"], bytes_reduced=4 * 83)])
    assert run.clean and run.batchnorms == ["norm"] and run.bytes_reduced == 4 * 83
    assert [(r.spread, r.synced) for r in run.rows] == [(0.0, True)] * len(ref.gradients)
    assert run.summary()["max_spread"] == 0.0


def test_the_scale_is_rank_zeros_when_the_ranks_differ():
    """Unsynchronised ranks (each keeps its shard's gradient): the scale column is rank 0's
    least-squares multiple of the reference, as torch computes it, not another rank's."""
    model, x = made()
    ref = reference(model, x, mean_loss)
    shards = [grads_of(model, s, mean_loss)[0] for s in x.chunk(WORLD)]
    run = judge(ref, [rank(r, g) for r, g in enumerate(shards)])
    for row in run.rows:
        g0, g = shards[0][row.name].double().flatten(), ref.gradients[row.name].double().flatten()
        own, other = float(g0 @ g) / float(g @ g), float(shards[1][row.name].double().flatten() @ g) / float(g @ g)
        assert abs(own - other) > 1e-3, "the premise: the ranks' scales differ"
        assert row.scale == pytest.approx(own, rel=1e-9)


class WithEmpty(nn.Module):
    """An MLP with two parameters of no elements (a head configured to size 0): one used in
    forward, so torch gives it an empty gradient, one never used, so it gets none."""

    def __init__(self):
        super().__init__()
        self.body = MLP()
        self.used, self.unused = nn.Parameter(torch.zeros(0, 3)), nn.Parameter(torch.zeros(0))

    def forward(self, x):
        return self.body(x) + self.used.sum(0)


def test_a_parameter_of_no_elements_is_a_row_of_zero_elements():
    torch.manual_seed(0)
    model, x = WithEmpty(), torch.randn(8, 6)
    ref = reference(model, x, mean_loss)
    assert ref.gradients["used"].shape == (0, 3) and ref.gradients["unused"] is None, "the premise"
    run = judge(ref, all_reduced_without(model, x, ["unused"]))
    rows = {r.name: r for r in run.rows}
    assert rows["used"].numel == 0 and rows["used"].agrees and not rows["used"].no_grad
    assert rows["unused"].numel == 0 and rows["unused"].no_grad and rows["unused"].agrees
    assert run.clean
    # a Reference without the parameters' sizes (numels) takes them from the gradients
    ref.numels = {}
    rows = {r.name: r for r in judge(ref, all_reduced_without(model, x, ["unused"])).rows}
    assert [rows[n].numel for n, _ in model.named_parameters()] == [p.numel() for _, p in model.named_parameters()]


def test_a_float64_model_is_judged_at_float64s_rounding():
    """A float64 model whose ranks started from weights rounded to float32 (a float32
    checkpoint): torch's gradients then differ by about 1e-8, a million times float64's
    rounding and far below float32's: they differ, as no rounding of float64 explains it."""
    model, x = made()
    model, x = model.double(), x.double()
    with torch.no_grad():  # float64 weights, not float32's widened
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-3)
    grads, value = grads_of(model, x, mean_loss, torch.float64)
    norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads.values()))
    ref = Reference(grads, value, norm, "t", "t", 8, torch.float64, 0, "MLP", {}, None,
                    {n: p.numel() for n, p in model.named_parameters()})
    rounded = copy.deepcopy(model).float().double()
    ranks = all_reduced(rounded, x, mean_loss, dtype=torch.float64)
    got = ranks[0].gradients()
    errs = {n: rel(got[n], g) for n, g in grads.items()}
    assert all(1e-10 < e < 1e-6 for e in errs.values()), f"the premise: {errs}"
    run = judge(ref, ranks)
    assert {r.name for r in run.differing} == set(grads)
    assert [r.worst.rel_err for r in run.rows] == pytest.approx(list(errs.values()), rel=1e-6)


def test_a_gradient_within_the_references_own_rounding_agrees():
    """tanh nearly saturated (inputs around 20): torch's float32 gradient of fc1 is 1e-4 off
    its float64 value on one process. Ranks that hold the float64 gradient rounded to float32,
    closer to the truth than the reference, are within the reference's own rounding: they agree."""
    model, x = made()
    x = x + 20

    def loss(out):
        return (out.sum(1) - 1.0).pow(2).mean()

    ref = reference(model, x, loss)
    exact, _ = grads_of(model, x, loss, torch.float64)
    closer = {n: g.float() for n, g in exact.items()}
    off = rel(closer["fc1.weight"], ref.gradients["fc1.weight"])
    assert rel(closer["fc1.weight"], exact["fc1.weight"]) < rel(ref.gradients["fc1.weight"], exact["fc1.weight"])
    assert off > 1e-5, "the premise: far beyond one sum's rounding (16u√8 = 2.7e-6)"
    run = judge(ref, [rank(r, closer) for r in range(WORLD)])
    row = next(r for r in run.rows if r.name == "fc1.weight")
    assert row.per_rank[0].rel_err == pytest.approx(off, rel=1e-6) and row.agrees and run.clean


class BatchGated(nn.Module):
    """The BatchNorm MLP, plus a small correction `aux` only on a batch of more than 4 samples:
    the one process (8 samples) uses it, each rank (4) does not."""

    def __init__(self):
        super().__init__()
        self.body, self.aux = MLP(norm=True), nn.Linear(6, 3)

    def forward(self, x):
        out = self.body(x)
        return out + 1e-3 * self.aux(x) if x.shape[0] > 4 else out


def test_batchnorms_worst_error_is_torchs_over_the_gradients_both_sides_have():
    torch.manual_seed(0)
    model, x = BatchGated(), torch.randn(8, 6)
    ref = reference(model, x, mean_loss)
    runs = all_reduced_without(model, x, ["aux.weight", "aux.bias"], batchnorms=["body.norm"])
    got = runs[0].gradients()
    assert got["aux.weight"] is None and ref.gradients["aux.weight"] is not None, "the premise"
    exact, _ = grads_of(model, x, mean_loss, torch.float64)
    off = {n for n, g in ref.gradients.items() if got[n] is not None and rel(got[n], g) > 1e-3
           and float(exact[n].norm()) > 1e-12}
    worst = max(rel(got[n], ref.gradients[n]) for n in off)
    assert "body.fc1.weight" in off and worst < 0.9, "the premise"
    run = judge(ref, runs)
    assert {r.name for r in run.differing} == off | {"aux.weight", "aux.bias"}
    (cause,) = suspects(run, Setup(ModelSpec("t.py:BatchGated")))
    assert cause.kind is CauseKind.BATCHNORM
    assert cause.evidence["max_rel_err"] == pytest.approx(worst, rel=1e-6)


def test_a_sum_loss_on_a_model_of_one_parameter():
    torch.manual_seed(0)
    model, x = nn.Linear(6, 3, bias=False), torch.randn(8, 6)
    ref = reference(model, x, sum_loss)
    run = judge(ref, all_reduced(model, x, sum_loss))
    (cause,) = suspects(run, Setup(ModelSpec("t.py:Linear")))
    assert cause.kind is CauseKind.SUM_LOSS and cause.subjects == ["weight"]
    got = run.rows[0]
    assert got.scale == pytest.approx(1 / WORLD, rel=1e-5)


def test_one_cause_not_proven_is_rerun_once():
    """Each rerun starts every rank again (seconds each): a cause rerun alone is not rerun
    "together" with itself, and no cause means no rerun."""
    model, x = made()
    wrong = judge(reference(model, x, sum_loss), all_reduced(model, x, sum_loss))
    asked = []

    def rerun(fixing):
        asked.append([c.kind for c in fixing])
        return wrong

    causes = suspects(wrong, Setup(ModelSpec("t.py:MLP")))
    prove(causes, rerun)
    assert asked == [[CauseKind.SUM_LOSS]] and causes[0].proven is False
    asked.clear()
    prove([], rerun)
    assert asked == []


def test_shards_under_the_maximum_whose_whole_is_over_it_are_clipping_on_shards():
    """FSDP2, the maximum between the larger shard's norm and the whole gradient's: torch's
    clip_grad_norm_ on each shard leaves both alone (factor 1), one process clips."""
    model, x = made()
    whole, _ = grads_of(model, x, mean_loss)
    norms = [_norm({n: g.chunk(WORLD)[r] for n, g in whole.items()}) for r in range(WORLD)]
    limit = (max(norms) + _norm(whole)) / 2
    ref = _clipped_reference(model, x, mean_loss, whole, limit)
    _, runs = _fsdp_ranks(whole, limit, by_shard=True)
    assert [r.step.factor for r in runs] == [1.0, 1.0] and ref.step.factor < 0.95, "the premise"
    run = judge(ref, runs)
    (cause,) = [c for c in suspects(run, Setup(ModelSpec("t.py:MLP"), wrap="fsdp", clip=limit), ref.step)
                if c.kind is CauseKind.CLIP_ON_SHARDS]
    assert cause.evidence["max_norm"] == pytest.approx(limit, rel=1e-5)
    assert cause.evidence["shard_norms"] == pytest.approx(norms, rel=1e-6)


def test_a_sum_loss_under_the_maximum_on_the_ranks_is_not_clipping_on_shards():
    """FSDP2, a sum loss: the ranks' whole gradient (1/N of one process's) is under the
    maximum and one process's is over it. clip_grad_norm_ by the whole gradient would leave
    the ranks alone too: the step is not where they differ. (A sum of squares over 8 samples
    times 1e-2: gradients of norm below 1.)"""
    model, x = made()
    loss = _times(sum_loss, 1e-2)
    whole_ref, _ = grads_of(model, x, loss)
    limit = 0.75 * _norm(whole_ref)
    ref = _clipped_reference(model, x, loss, whole_ref, limit)
    reduced = {n: g / WORLD for n, g in whole_ref.items()}
    _, runs = _fsdp_ranks(reduced, limit, by_shard=True)
    assert [r.step.factor for r in runs] == [1.0, 1.0] and ref.step.factor < 0.9 and limit < 1, "the premise"
    run = judge(ref, runs)
    assert run.differing
    assert CauseKind.CLIP_ON_SHARDS not in [c.kind for c in suspects(run, Setup(ModelSpec("t.py:MLP"), wrap="fsdp", clip=limit), ref.step)]


@pytest.mark.parametrize("scale", [1.0, 1e-3])
def test_ddp_clips_the_whole_gradient_on_every_rank_so_never_on_shards(scale):
    """DDP, mean losses accumulated over 2 micro-steps (every rank holds 2x one process's
    gradient): clip_grad_norm_ clips each rank's whole gradient, one process's stays under the
    maximum. Each rank's factor is torch's for the whole gradient (to 1e-4 only with the eps)."""
    model, x = made()
    loss = _times(mean_loss, scale)
    whole, _ = grads_of(model, x, loss)
    limit = 1.5 * _norm(whole)
    ref = _clipped_reference(model, x, loss, whole, limit)
    reduced = all_reduced(model, x, loss, micro=2)[0].gradients()
    after, step = _clipped(reduced, limit)
    assert ref.step.factor == 1.0 and step.factor < 0.9, "the premise"
    run = judge(ref, [rank(r, after, step=step) for r in range(WORLD)])
    assert run.differing
    assert CauseKind.CLIP_ON_SHARDS not in [c.kind for c in suspects(run, Setup(ModelSpec("t.py:MLP"), accumulate=2, clip=limit), ref.step)]


def test_accumulation_clipped_on_shards_with_one_process_under_the_maximum():
    """FSDP2 with 2 micro-steps' mean losses (ranks at 2x one process's gradient): each
    shard is over the maximum and clipped by its own norm; one process is under it and left
    alone, so only the shards say what the maximum was."""
    model, x = made()
    whole, _ = grads_of(model, x, mean_loss)
    reduced = all_reduced(model, x, mean_loss, micro=2)[0].gradients()
    norms = [_norm({n: g.chunk(WORLD)[r] for n, g in reduced.items()}) for r in range(WORLD)]
    limit = (_norm(whole) + min(norms)) / 2
    ref = _clipped_reference(model, x, mean_loss, whole, limit)
    _, runs = _fsdp_ranks(reduced, limit, by_shard=True)
    assert ref.step.factor == 1.0 and all(r.step.factor < 0.99 for r in runs), "the premise"
    run = judge(ref, runs)
    setup = Setup(ModelSpec("t.py:MLP"), wrap="fsdp", accumulate=2, clip=limit)
    (cause,) = [c for c in suspects(run, setup, ref.step) if c.kind is CauseKind.CLIP_ON_SHARDS]
    assert cause.evidence["max_norm"] == pytest.approx(limit, rel=1e-5) and cause.evidence["reference_factor"] == 1.0


@pytest.mark.parametrize("where", ["the smaller shard's norm", "a thousandth of it"])
def test_clipping_on_shards_at_a_maximum_on_the_edge(where):
    """The maximum at the smaller shard's norm exactly (clip_grad_norm_'s eps leaves that shard
    scaled by 1 - 2e-6: not clipped), or far below both (factors of 1e-3 and less)."""
    model, x = made()
    whole, _ = grads_of(model, x, mean_loss)
    norms = [_norm({n: g.chunk(WORLD)[r] for n, g in whole.items()}) for r in range(WORLD)]
    limit = min(norms) * (1.0 if where == "the smaller shard's norm" else 1e-3)
    ref = _clipped_reference(model, x, mean_loss, whole, limit)
    _, runs = _fsdp_ranks(whole, limit, by_shard=True)
    factors = [r.step.factor for r in runs]
    assert 1 - 1e-5 < max(factors) < 1 if where == "the smaller shard's norm" else max(factors) <= 1e-3, "the premise"
    run = judge(ref, runs)
    (cause,) = [c for c in suspects(run, Setup(ModelSpec("t.py:MLP"), wrap="fsdp", clip=limit), ref.step)
                if c.kind is CauseKind.CLIP_ON_SHARDS]
    assert cause.evidence["max_norm"] == pytest.approx(limit, rel=1e-5)
    assert cause.evidence["factors"] == factors


def _effect_of(before: dict, after: dict) -> StepEffect:
    """What a step did, from torch's tensors: the least-squares factor c with after ≈ c·before,
    how far `after` is from c·before (relative), and the norm before."""
    b = torch.cat([g.double().flatten() for g in before.values()])
    a = torch.cat([g.double().flatten() for g in after.values()])
    c = float(a @ b) / float(b @ b)
    return StepEffect(c, float((a - c * b).norm() / a.norm()), float(b.norm()))


def test_a_rank_whose_step_was_no_single_factor_is_not_clipping_on_shards():
    """FSDP2 on 3 ranks, a step that clips each shard by its own norm and then clips values
    at v (torch's clip_grad_value_): v is under one rank's largest element, so that rank's
    elements were not all scaled by one factor; "each rank scaled by its own factor" would be
    false of it, so the clipping is not explained as on shards."""
    model, x = made()
    whole, _ = grads_of(model, x, mean_loss)
    world = 3
    shards = [{n: g.chunk(world)[r] for n, g in whole.items()} for r in range(world)]
    limit = 0.5 * min(_norm(s) for s in shards)
    norm_clipped = [_clipped(s, limit)[0] for s in shards]
    tops = [max(float(g.abs().max()) for g in c.values()) for c in norm_clipped]
    v = (sorted(tops)[-1] + sorted(tops)[-2]) / 2  # under the largest rank's top, over the others'
    steps, after = [], []
    for s, c in zip(shards, norm_clipped):
        leaves = {n: torch.zeros_like(g, requires_grad=True) for n, g in c.items()}
        for n, leaf in leaves.items():
            leaf.grad = c[n].clone()
        torch.nn.utils.clip_grad_value_(list(leaves.values()), v)
        after.append({n: leaf.grad for n, leaf in leaves.items()})
        steps.append(_effect_of(s, after[-1]))
    assert sorted(e.residual > 1e-3 for e in steps) == [False, False, True], "the premise: one rank's step is not one factor"
    ref = _clipped_reference(model, x, mean_loss, whole, limit)
    gathered = {n: torch.cat([a[n] for a in after]) for n in whole}
    run = judge(ref, [rank(r, gathered, step=steps[r]) for r in range(world)])
    assert run.differing
    setup = Setup(ModelSpec("t.py:MLP"), wrap="fsdp", world=world, clip=limit)
    assert CauseKind.CLIP_ON_SHARDS not in [c.kind for c in suspects(run, setup, ref.step)]



def test_ddp_ranks_out_of_sync_clip_each_their_whole_gradient_not_shards():
    """DDP ranks whose gradients were never all-reduced (each keeps its own shard's, as when
    DDP skips a bucket): clip_grad_norm_ on each rank clips the whole gradient that rank holds,
    by its own norm. The factors differ between ranks, but no rank clipped a shard."""
    model, x = made()
    ref = reference(model, x, mean_loss)
    own = [grads_of(model, s, mean_loss)[0] for s in x.chunk(WORLD)]
    limit = 0.5 * min(_norm(g) for g in own)
    ref = _clipped_reference(model, x, mean_loss, ref.gradients, limit)
    clipped = [_clipped(g, limit) for g in own]
    assert abs(clipped[0][1].factor - clipped[1][1].factor) > 1e-3, "the premise: the ranks' norms differ"
    run = judge(ref, [rank(r, a, step=step) for r, (a, step) in enumerate(clipped)])
    assert run.unsynced
    assert CauseKind.CLIP_ON_SHARDS not in [c.kind for c in suspects(run, Setup(ModelSpec("t.py:MLP"), clip=limit), ref.step)]


def test_a_bfloat16_model_is_judged_at_its_own_rounding_and_a_sum_loss_still_differs():
    """A bfloat16 MLP: the ranks' mean of shard gradients differs from one process's by its
    rounding alone (torch: far above float32's tolerance, which `compare --ddp` applied to it, a
    false alarm), and within ten times its own rounding against float64; a sum loss's factor of
    N is still far outside it."""
    model, x = made()
    ref = reference(model, x, mean_loss, dtype=torch.bfloat16)
    ranks = all_reduced(model, x, mean_loss, dtype=torch.bfloat16)
    reduced = ranks[0].gradients()
    worst = max(rel(reduced[n], g) for n, g in ref.gradients.items())
    assert worst > 16 * 2.0**-24 * math.sqrt(x.shape[0]), "the premise: more than float32's rounding"
    assert all(rel(reduced[n], g) <= 10 * ref.noise[n] for n, g in ref.gradients.items()), "the premise: its own rounding"
    assert judge(ref, ranks).clean
    summed = judge(reference(model, x, sum_loss, dtype=torch.bfloat16), all_reduced(model, x, sum_loss, dtype=torch.bfloat16))
    assert {row.name for row in summed.differing} == set(ref.gradients)
    assert all(row.scale == pytest.approx(1 / WORLD, rel=2e-2) for row in summed.rows)
    (cause,) = suspects(summed, Setup(ModelSpec("t.py:MLP")))  # 1/N up to bfloat16's rounding, not float32's
    assert cause.kind is CauseKind.SUM_LOSS


def test_a_bfloat16_model_whose_float64_run_failed_is_judged_at_the_half_cap():
    """No rounding measured (the user's forward pins bfloat16, so distributed/reference.py has no
    float64 run): the healthy ranks still agree, the sum loss still differs."""
    model, x = made()
    ref = reference(model, x, mean_loss, dtype=torch.bfloat16)
    ref.noise = {}
    assert judge(ref, all_reduced(model, x, mean_loss, dtype=torch.bfloat16)).clean
    summed = reference(model, x, sum_loss, dtype=torch.bfloat16)
    summed.noise = {}
    assert len(judge(summed, all_reduced(model, x, sum_loss, dtype=torch.bfloat16)).differing) == len(ref.gradients)


def test_a_bfloat16_batchnorm_per_shard_still_differs_beyond_its_own_rounding():
    """Per-shard statistics in a bfloat16 model: the BatchNorm's own weight is off by more than ten
    times its rounding against float64 (torch measures both), so it differs, and the cause is named."""
    model, x = made(norm=True)
    ref = reference(model, x, mean_loss, dtype=torch.bfloat16)
    runs = all_reduced(model, x, mean_loss, dtype=torch.bfloat16, batchnorms=["norm"])
    err = rel(runs[0].gradients()["norm.weight"], ref.gradients["norm.weight"])
    assert err > 10 * ref.noise["norm.weight"], "the premise: beyond ten times its own rounding"
    run = judge(ref, runs)
    assert "norm.weight" in {r.name for r in run.differing}
    (cause,) = suspects(run, Setup(ModelSpec("t.py:MLP")))
    assert cause.kind is CauseKind.BATCHNORM and cause.subjects == ["norm"]
