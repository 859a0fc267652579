"""`compare --ddp/--fsdp` and `grads --ddp` on real process groups (gloo, 2 ranks, CPU).

The truth comes from torch.distributed run by this file: a hand-written DDP/FSDP2 script
(`_handwritten`, started with torch.multiprocessing.spawn) and the same models on one process.
Process groups cost seconds to start, so gradcli's runs share one group of 2 ranks
(module-scoped), the hand-written runs share another, and only the failing-rank and CLI tests
start their own.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import socket
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from gradcli.distributed.launch import RankError, start_ranks
from gradcli.distributed.result import CauseKind
from gradcli.targets.spec import ModelSpec
from gradcli.distributed.run import compare_distributed, make_setup
from gradcli.distributed.setup import Fix
from paths import ROOT

MODELS = ROOT / "examples" / "distributed" / "models.py"
STEPS = MODELS.with_name("steps.py")
SEED = 7
WORLD = 2
BATCH = 16
#: The tolerance of a float32 gradient reduced over ranks, against one process (rel. error).
CLOSE = 1e-5
#: Micro-steps of the gradient-accumulation cases.
MICRO = 4


def _example(path: Path):
    """An example file as a module of its own name (never one cached by another test)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"distributed_{path.stem}_for_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _models():
    return _example(MODELS)


def _data() -> torch.Tensor:
    return torch.randn(BATCH, 8, generator=torch.Generator().manual_seed(123))


def _var() -> str:
    # The batch written out in full, so that gradcli and this file feed the very same numbers.
    return "x=" + repr(_data().tolist())


def _model(name: str) -> nn.Module:
    torch.manual_seed(SEED)  # as gradcli seeds before constructing the model
    return getattr(_models(), name)()


def _steps():
    return _example(STEPS)


def _one_process(name: str, reduce: str) -> dict[str, torch.Tensor | None]:
    model = _model(name)
    out = model(_data())
    (out.pow(2).sum() if reduce == "sum" else out.pow(2).mean()).backward()
    if reduce.startswith("clip-"):  # the step after backward, on one process
        getattr(_steps(), reduce.replace("-", "_") + "_norm")(model)
    return {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}


# (model, loss and step, wrap): "accumulate" is MICRO micro-batches of a mean loss per rank,
# the first MICRO-1 under no_sync; "clip-local"/"clip-whole" a mean loss, then steps.py's
# clip_local_norm / clip_whole_norm after backward.
CASES = [("MLP", "mean", "ddp"), ("MLP", "mean", "fsdp"), ("WithBatchNorm", "mean", "ddp"),
         ("MLP", "sum", "ddp"), ("AuxHead", "mean", "ddp"), ("SeededByRank", "mean", "fsdp"),
         ("MLP", "accumulate", "ddp"), ("MLP", "accumulate", "fsdp"), ("MLP", "clip-local", "fsdp"),
         ("MLP", "clip-whole", "fsdp")]


def _handwritten(rank: int, world: int, port: int, out: str) -> None:
    """What a user's training script does: DDP or fully_shard, its shard x[rank::world]."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank))  # as torchrun sets RANK
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = {}
    for name, reduce, wrap in CASES:
        model = _model(name)
        if wrap == "ddp":
            wrapped = DistributedDataParallel(model)
        else:
            mesh = init_device_mesh("cpu", (world,))
            for child in model.children():
                fully_shard(child, mesh=mesh)
            wrapped = fully_shard(model, mesh=mesh)
        loss = lambda: (lambda o: o.pow(2).sum() if reduce == "sum" else o.pow(2).mean())(wrapped(_data()[rank::world]))
        if reduce == "accumulate":  # a gradient-accumulation loop, as training scripts write it (without / MICRO)
            for k, micro in enumerate(_data()[rank::world].chunk(MICRO)):
                if wrap == "fsdp":
                    wrapped.set_requires_gradient_sync(k == MICRO - 1)
                    wrapped(micro).pow(2).mean().backward()
                    continue
                with (wrapped.no_sync() if k < MICRO - 1 else contextlib.nullcontext()):
                    wrapped(micro).pow(2).mean().backward()
        else:
            loss().backward()
        if reduce.startswith("clip-"):
            getattr(_steps(), reduce.replace("-", "_") + "_norm")(model)
        grads = {}
        for n, p in model.named_parameters():
            g = p.grad
            grads[n] = None if g is None else (g.full_tensor() if wrap == "fsdp" else g).detach().clone()
        error = None
        if wrap == "fsdp":  # FSDP2's forward leaves nothing for a next-iteration check
            results[(name, reduce, wrap)] = (grads, error)
            continue
        try:
            loss()  # DDP checks at the next forward that the last backward reduced everything
        except RuntimeError as err:
            error = str(err)
        results[(name, reduce, wrap)] = (grads, error)
    torch.save(results, f"{out}.{rank}")
    dist.destroy_process_group()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    """torch.distributed's own gradients for every case, per rank, and one process's."""
    import torch.multiprocessing as mp

    out = str(tmp_path_factory.mktemp("truth") / "grads")
    mp.spawn(_handwritten, args=(WORLD, _port(), out), nprocs=WORLD)
    per_rank = [torch.load(f"{out}.{r}", weights_only=False) for r in range(WORLD)]
    return {case: ([per_rank[r][case] for r in range(WORLD)], _one_process(case[0], case[1])) for case in CASES}


@pytest.fixture(scope="module")
def ranks():
    with start_ranks(WORLD) as group:
        yield group


def _compare(ranks, name: str, reduce: str, wrap: str, loss: str | None = None, **options):
    setup = make_setup(ModelSpec.of(f"{MODELS}:{name}", [_var()], loss=loss or f"out.pow(2).{reduce}()", seed=SEED), wrap=wrap,
                       world=WORLD, **options)
    return compare_distributed(setup, ranks=ranks)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("wrap", ["ddp", "fsdp"])
def test_a_healthy_mlp_agrees(ranks, truth, wrap):
    per_rank, single = truth[("MLP", "mean", wrap)]
    for grads, _ in per_rank:  # torch: the reduced gradient is one process's
        assert all(_rel(grads[n], single[n]) < CLOSE for n in single)
    result = _compare(ranks, "MLP", "mean", wrap)
    assert result.ok, result.problems
    assert result.causes == []
    assert [r.name for r in result.first.rows] == list(single)
    assert all(r.spread == 0 for r in result.first.rows)
    norm = float(torch.stack([g.norm() for g in single.values()]).norm())
    assert result.first.norms.reference == pytest.approx(norm, rel=1e-6)
    assert result.first.norms.reduced == [pytest.approx(norm, rel=CLOSE)] * WORLD
    if wrap == "fsdp":  # each rank's shard norm sees part of every gradient; together they are the whole
        shards = result.first.norms.per_shard
        assert all(s < norm for s in shards)
        assert sum(s * s for s in shards) ** 0.5 == pytest.approx(norm, rel=CLOSE)
    else:
        assert result.first.norms.per_shard == result.first.norms.reduced
    document = result.as_dict()
    assert document["ok"] is True and document["wrap"] == wrap and document["world"] == WORLD
    json.dumps(document)


def test_batchnorm_differs_and_whole_batch_statistics_agree(ranks, truth):
    per_rank, single = truth[("WithBatchNorm", "mean", "ddp")]
    torch_differs = {n for n in single if single[n].norm() > 1e-4 and _rel(per_rank[0][0][n], single[n]) > 1e-3}
    assert "l1.weight" in torch_differs  # torch's DDP: per-rank statistics change the gradient
    result = _compare(ranks, "WithBatchNorm", "mean", "ddp")
    assert not result.ok
    differs = {p.subject for p in result.problems if p.kind == "rank-gradient-differs"}
    assert torch_differs <= differs
    (cause,) = result.causes
    assert cause.kind is CauseKind.BATCHNORM and cause.subjects == ["bn"] and cause.fix is Fix.SYNC_BATCHNORM
    assert cause.proven is True and cause.after["differing"] == []
    # gradcli's own numbers are torch DDP's
    row = {r.name: r for r in result.first.rows}
    assert row["l1.weight"].worst.rel_err == pytest.approx(_rel(per_rank[0][0]["l1.weight"], single["l1.weight"]), rel=1e-3)


def test_a_sum_loss_is_found_with_ratio_one_over_n(ranks, truth):
    per_rank, single = truth[("MLP", "sum", "ddp")]
    for n in single:  # torch: DDP's average divides the sum by N
        assert _rel(per_rank[0][0][n] * WORLD, single[n]) < CLOSE
    result = _compare(ranks, "MLP", "sum", "ddp")
    assert {p.subject for p in result.problems if p.kind == "rank-gradient-differs"} == set(single)
    (cause,) = result.causes
    assert cause.kind is CauseKind.SUM_LOSS and cause.proven is True
    assert cause.evidence["expected_ratio"] == 1 / WORLD
    assert all(r == pytest.approx(1 / WORLD, rel=1e-5) for r in cause.evidence["ratios"].values())



HALF_MODELS = """
import torch
from torch import nn


class HalfMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 4)
        self.to(torch.bfloat16)

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x.to(self.l1.weight.dtype))))


class PinnedHalfMLP(HalfMLP):  # its forward pins bfloat16: there is no float64 run of it
    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x.to(torch.bfloat16))))
"""


@pytest.mark.parametrize("name", ["HalfMLP", "PinnedHalfMLP"])
def test_a_bfloat16_model_under_ddp_agrees_at_its_own_rounding(ranks, tmp_path, name):
    """torch, in this process, as DDP computes it: the mean of the shards' bfloat16 gradients is
    off from one process's by its summing order alone, above float32's rounding (a false alarm
    once); a sum loss is still found."""
    path = tmp_path / "half_models.py"
    path.write_text(HALF_MODELS, encoding="utf-8")
    namespace: dict = {}
    exec(compile(HALF_MODELS, str(path), "exec"), namespace)
    torch.manual_seed(SEED)
    model, x = namespace[name](), _data()
    single = dict(zip([n for n, _ in model.named_parameters()],
                      torch.autograd.grad(model(x).pow(2).mean(), list(model.parameters()))))
    shards = [torch.autograd.grad(model(x[r::WORLD]).pow(2).mean(), list(model.parameters())) for r in range(WORLD)]
    reduced = dict(zip(single, (torch.stack(gs).mean(0) for gs in zip(*shards))))
    assert max(_rel(reduced[n], single[n]) for n in single) > 1e-3, "the premise: beyond float32's tolerance"
    setup = make_setup(ModelSpec.of(f"{path}:{name}", [_var()], loss="out.pow(2).mean()", seed=SEED), wrap="ddp", world=WORLD)
    result = compare_distributed(setup, ranks=ranks)
    assert result.ok, result.problems
    setup = make_setup(ModelSpec.of(f"{path}:{name}", [_var()], loss="out.pow(2).sum()", seed=SEED), wrap="ddp", world=WORLD)
    (cause,) = compare_distributed(setup, ranks=ranks).causes
    assert cause.kind is CauseKind.SUM_LOSS

def test_an_unused_branch_under_ddp_is_explained_by_name(ranks, truth):
    per_rank, single = truth[("AuxHead", "mean", "ddp")]
    assert single["aux.weight"] is None and single["aux.bias"] is None
    errors = [error for _, error in per_rank]
    assert all(e is not None and "Expected to have finished reduction" in e for e in errors)
    # torch: the parameters sharing the unreduced bucket keep each rank's own gradient
    torch_unsynced = {n for n in single if single[n] is not None and _rel(per_rank[0][0][n], per_rank[1][0][n]) > 1e-6}
    result = _compare(ranks, "AuxHead", "mean", "ddp")
    kinds = {p.kind for p in result.problems}
    assert "ddp-error" in kinds
    assert {p.subject for p in result.problems if p.kind == "unsynchronised"} == torch_unsynced
    (cause,) = result.causes
    assert cause.kind is CauseKind.UNUSED and cause.subjects == ["aux.bias", "aux.weight"]
    assert cause.evidence["no_grad_by_rank"] == {"0": ["aux.weight", "aux.bias"], "1": ["aux.weight", "aux.bias"]}
    assert "Expected to have finished reduction" in cause.evidence["ddp_error"]
    assert cause.fix is Fix.FIND_UNUSED and cause.proven is True
    from gradcli.render.training.distributed import distributed_text

    text = distributed_text(result)
    assert "aux.weight, aux.bias" in text and "find_unused_parameters=True" in text


def test_initial_weights_that_differ_between_ranks_under_fsdp2(ranks, truth):
    per_rank, single = truth[("SeededByRank", "mean", "fsdp")]
    assert _rel(per_rank[0][0]["l1.weight"], single["l1.weight"]) > 1e-3  # torch: fully_shard keeps each rank's init
    result = _compare(ranks, "SeededByRank", "mean", "fsdp")
    assert not result.ok and not result.as_dict()["initial_weights_agree"]
    (cause,) = result.causes
    assert cause.kind is CauseKind.INITIAL_WEIGHTS and cause.fix is Fix.BROADCAST and cause.proven is True


@pytest.mark.parametrize("wrap", ["ddp", "fsdp"])
def test_accumulation_off_by_the_step_count_is_found_with_ratio_k(ranks, truth, wrap):
    per_rank, single = truth[("MLP", "accumulate", wrap)]
    for grads, _ in per_rank:  # torch: MICRO mean losses accumulated under no_sync give MICRO x the gradient
        assert all(_rel(grads[n] / MICRO, single[n]) < CLOSE for n in single)
        assert all(_rel(grads[n], single[n]) > 1 for n in single)
    result = _compare(ranks, "MLP", "mean", wrap, accumulate=MICRO)
    assert {p.subject for p in result.problems if p.kind == "rank-gradient-differs"} == set(single)
    rows = {r.name: r for r in result.first.rows}
    for n in single:  # gradcli's reduced gradients are torch's accumulated ones
        assert rows[n].worst.rel_err == pytest.approx(_rel(per_rank[0][0][n], single[n]), rel=1e-4)
    (cause,) = result.causes
    assert cause.kind is CauseKind.ACCUMULATION and cause.fix is Fix.DIVIDE_BY_STEPS and cause.proven is True
    assert cause.evidence["steps"] == MICRO and cause.evidence["expected_ratio"] == MICRO
    assert all(r == pytest.approx(MICRO, rel=1e-5) for r in cause.evidence["ratios"].values())
    # The loop written right (the loss over the micro-steps: `/ accumulate`) agrees, as torch's does.
    healthy = _compare(ranks, "MLP", "mean", wrap, loss="out.pow(2).mean() / accumulate", accumulate=MICRO)
    assert healthy.ok and healthy.causes == [], healthy.problems


def test_batchnorm_under_accumulation_is_not_proven_by_whole_batch_statistics(ranks):
    # torch, one process: BatchNorm over the micro-steps' samples (even all ranks' together)
    # is not BatchNorm over the whole batch, so no rerun on the ranks can agree.
    whole, chunked = _model("WithBatchNorm"), _model("WithBatchNorm")
    whole(_data()).pow(2).mean().backward()
    for part in _data().chunk(2):
        (chunked(part).pow(2).mean() / 2).backward()
    assert _rel(chunked.l1.weight.grad, whole.l1.weight.grad) > 1e-3
    result = _compare(ranks, "WithBatchNorm", "mean", "ddp", loss="out.pow(2).mean() / accumulate", accumulate=2)
    (cause,) = result.causes
    assert cause.kind is CauseKind.BATCHNORM and cause.proven is False
    from gradcli.render.training.distributed import distributed_text

    text = distributed_text(result)
    assert "its 4 samples of each micro-step" in text and "no setup gives BatchNorm the whole batch's statistics" in text


def test_norm_clipping_on_shards_under_fsdp2_is_found_and_clipping_the_whole_norm_agrees(ranks, truth):
    steps = _steps()
    local, single_local = truth[("MLP", "clip-local", "fsdp")]
    whole, single_whole = truth[("MLP", "clip-whole", "fsdp")]
    # torch: clipping each rank's shard by its own norm is not one process's clipping; the
    # DTensor-aware clip_grad_norm_ is
    assert all(_rel(local[0][0][n], single_local[n]) > 1e-2 for n in single_local)
    assert all(_rel(whole[0][0][n], single_whole[n]) < CLOSE for n in single_whole)
    result = _compare(ranks, "MLP", "mean", "fsdp", before_step=f"{STEPS}:clip_local_norm")
    assert {p.subject for p in result.problems if p.kind == "rank-gradient-differs"} == set(single_local)
    rows = {r.name: r for r in result.first.rows}
    for n in single_local:
        assert rows[n].worst.rel_err == pytest.approx(_rel(local[0][0][n], single_local[n]), rel=1e-3)
    (cause,) = result.causes
    assert cause.kind is CauseKind.CLIP_ON_SHARDS and cause.fix is Fix.CLIP_WHOLE and cause.proven is True
    assert cause.evidence["max_norm"] == pytest.approx(steps.MAX_NORM, rel=1e-5)
    # Each rank's factor is clip_grad_norm_'s rule applied to its own shard's norm (torch, here)
    model = _model("MLP")
    model(_data()).pow(2).mean().backward()
    for r, factor in enumerate(cause.evidence["factors"]):
        shard = [p.grad.chunk(WORLD)[r] for p in model.parameters()]  # fully_shard splits dim 0 evenly here
        norm = float(torch.stack([g.norm() for g in shard]).norm())
        assert factor == pytest.approx(min(1.0, steps.MAX_NORM / (norm + 1e-6)), rel=1e-5)
    healthy = _compare(ranks, "MLP", "mean", "fsdp", clip=steps.MAX_NORM)
    assert healthy.ok and healthy.causes == [], healthy.problems
    assert healthy.first.norms.reduced == [pytest.approx(steps.MAX_NORM, rel=1e-4)] * WORLD


def test_fsdp2_shards_a_model_with_tied_weights(ranks):
    # A language model's head shares the embedding's weight: sharding each top-level block
    # on its own makes fully_shard raise; gradcli leaves tied blocks to the root unit.
    model = _model("Tied")
    model(_data()).pow(2).mean().backward()
    assert model.out.weight is model.inp.weight
    norm = float(torch.stack([p.grad.norm() for p in model.parameters()]).norm())
    result = _compare(ranks, "Tied", "mean", "fsdp")
    assert result.ok, result.problems
    assert [r.name for r in result.first.rows] == [n for n, _ in model.named_parameters()]
    assert result.first.norms.reduced == [pytest.approx(norm, rel=CLOSE)] * WORLD


PROBE = "GRADCLI_RANK_ENVIRONMENT_PROBE"


def _probe(rank: int, world: int) -> str | None:
    return os.environ.get(PROBE)


def test_each_groups_ranks_see_the_environment_the_parent_has_when_it_starts(monkeypatch):
    # Python's own rule for a child process (os.environ as it is when the child starts), though
    # the ranks are forked from a server started with the first group
    monkeypatch.delenv(PROBE, raising=False)
    with start_ranks(WORLD) as first:
        assert first.run(_probe) == [os.environ.get(PROBE)] * WORLD
    monkeypatch.setenv(PROBE, "set after the first group")
    with start_ranks(WORLD) as second:
        assert second.run(_probe) == [os.environ[PROBE]] * WORLD


def test_a_rank_that_raises_ends_the_group_with_its_error():
    setup = make_setup(ModelSpec.of(f"{MODELS}:RankOneFails", ["x=randn(16, 8)"], loss="out.pow(2).mean()", seed=SEED), world=WORLD)
    with pytest.raises(RankError) as caught:
        compare_distributed(setup, timeout=120)
    err = caught.value
    assert err.rank == 1
    assert err.message.startswith("rank 1: ") and "raised ValueError: rank 1 cannot take this batch" in err.message
    assert f'File "{MODELS}"' in err.message and "raise ValueError" in err.message  # the user's own frame
    assert "torch/nn" not in err.message  # not torch's frames
    assert len(err.pids) == WORLD
    assert not {p.pid for p in multiprocessing.active_children()} & set(err.pids)
    for pid in err.pids:  # no stray process left
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_grads_ddp_flags_the_parameters_whose_ranks_disagree(ranks, truth):
    from gradcli.distributed.grads import grads_distributed
    from gradcli.render.formats import render

    per_rank, single = truth[("AuxHead", "mean", "ddp")]
    torch_unsynced = {n for n in single if single[n] is not None and _rel(per_rank[0][0][n], per_rank[1][0][n]) > 1e-6}
    setup = make_setup(ModelSpec.of(f"{MODELS}:AuxHead", [_var()], loss="out.pow(2).mean()", seed=SEED), world=WORLD)
    result = grads_distributed(setup, ranks=ranks)
    assert not result.ok
    assert {p.subject for p in result.problems if p.kind == "unsynchronised"} == torch_unsynced
    rows = {p.name: p for p in result.health.params}
    for name in torch_unsynced:  # the table's numbers are the reduced gradient's (rank 0's, unsynchronised here)
        assert rows[name].grad_norm == pytest.approx(float(per_rank[0][0][name].norm()), rel=1e-5)
    assert "NO GRAD" in rows["aux.weight"].flags
    text = "\n".join(str(line.item) for line in render(result, "text", width=120))
    assert "RANKS DIFFER" in text and "DDP raised on the next iteration" in text
    document = json.loads(render(result, "json"))
    assert document["distributed"]["unsynchronised"] and document["ok"] is False


def test_the_results_follow_the_protocol(ranks, cli):
    from gradcli.distributed.grads import grads_distributed
    from outcome_protocol import follows_the_protocol

    def setup(name):
        return make_setup(ModelSpec.of(f"{MODELS}:{name}", [_var()], loss="out.pow(2).mean()", seed=SEED), world=WORLD)

    follows_the_protocol(compare_distributed(setup("MLP"), ranks=ranks), passes=True)
    follows_the_protocol(compare_distributed(setup("WithBatchNorm"), ranks=ranks), passes=False)  # per-rank statistics
    follows_the_protocol(grads_distributed(setup("MLP"), ranks=ranks), passes=True)
    follows_the_protocol(grads_distributed(setup("AuxHead"), ranks=ranks), passes=False)  # an unsynchronised head


def test_cli_refuses_a_batch_the_ranks_cannot_share_and_two_wrappers(cli):
    bad = cli("compare", f"{MODELS}:MLP", "--var", "x=randn(15, 8)", "--ddp", "2")
    assert bad.exit_code == 2 and "a batch of 15 does not split evenly between 2 ranks" in bad.stderr
    both = cli("compare", f"{MODELS}:MLP", "--var", "x=randn(16, 8)", "--ddp", "2", "--fsdp", "2")
    assert both.exit_code == 2 and "give one of them" in both.stderr
    one = cli("grads", f"{MODELS}:MLP", "--var", "x=randn(16, 8)", "--ddp", "1")
    assert one.exit_code == 2 and "needs 2 or more ranks" in one.stderr
    uneven = cli("compare", f"{MODELS}:MLP", "--var", "x=randn(16, 8)", "--ddp", "2", "--accumulate", "3")
    assert uneven.exit_code == 2 and "do not split evenly into 3 micro-batches" in uneven.stderr
    alone = cli("compare", f"{MODELS}:MLP", "--var", "x=randn(16, 8)", "--clip-grad-norm", "1")
    assert alone.exit_code == 2 and "give it with --ddp N or --fsdp N" in alone.stderr
    two = cli("compare", f"{MODELS}:MLP", "--var", "x=randn(16, 8)", "--ddp", "2", "--clip-grad-norm", "1",
              "--before-step", f"{STEPS}:clip_whole_norm")
    assert two.exit_code == 2 and "give one of them" in two.stderr
    missing = cli("compare", f"{MODELS}:MLP", "--var", "x=randn(16, 8)", "--ddp", "2", "--before-step", f"{STEPS}:nope")
    assert missing.exit_code == 2 and "has no 'nope'" in missing.stderr


def test_under_torchrun_the_launchers_ranks_run_it_and_rank_zero_reports(truth):
    # torchrun starts the ranks and sets RANK/WORLD_SIZE: gradcli joins its group instead of
    # spawning one, and only rank 0 prints.
    import subprocess

    per_rank, single = truth[("WithBatchNorm", "mean", "ddp")]
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD),
                          "--master-port", str(_port()), "-m", "gradcli", "compare", f"{MODELS}:WithBatchNorm",
                          "--var", _var(), "--loss", "out.pow(2).mean()", "--ddp", str(WORLD), "--seed", str(SEED),
                          "--json"], capture_output=True, text=True, timeout=600)
    assert run.returncode != 0  # a rank's exit status 1 (a gradient differs) is torchrun's failure
    document = json.loads(run.stdout)  # one document: rank 0's
    assert document["world"] == WORLD and document["ok"] is False
    assert [(c["kind"], c["proven"]) for c in document["causes"]] == [("batchnorm-statistics", True)]
    l1 = next(p for p in document["parameters"] if p["name"] == "l1.weight")
    for r, grads in enumerate(per_rank):  # torch DDP's own error, rank by rank
        assert l1["ranks"][r]["rel_err"] == pytest.approx(_rel(grads[0]["l1.weight"], single["l1.weight"]), rel=1e-3)


def test_python_dash_m_gradcli_starts_ranks():
    # Spawned ranks import the main module again (as __mp_main__): `python -m gradcli` must not
    # run gradcli there too (it did, and every rank died before it reported).
    import subprocess

    run = subprocess.run([sys.executable, "-m", "gradcli", "compare", f"{MODELS}:MLP", "--var", "x=randn(16, 8)",
                          "--loss", "out.pow(2).mean()", "--ddp", "2", "--seed", "0", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert document["ok"] is True and document["world"] == 2


def test_bad_input_found_while_the_ranks_start_is_one_clean_paragraph():
    """The loss is parsed while the spawned ranks import torch; refused there, the ranks are
    ended, and the error is all the user sees: no traceback, no warning of leaked semaphores
    (the queues to the ranks were still held by the error's traceback at exit)."""
    import subprocess

    run = subprocess.run([sys.executable, "-m", "gradcli", "compare", f"{MODELS}:MLP", "--var", "x=randn(16, 8)",
                          "--loss", "out.foo()", "--ddp", "2"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith("error: unknown method 'foo'\n")
    assert "leaked" not in run.stderr and "Traceback" not in run.stderr and "Warning" not in run.stderr
