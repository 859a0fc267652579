"""No false alarm on what people do on purpose: tests/watch_healthy.py's runs under gradcli.watch
raise no finding and no warning, and end with weights bit-identical to the same loop unwatched.

Gradient accumulation, frozen BatchNorm while fine-tuning, a frozen backbone with a LoRA adapter,
an EMA teacher (AveragedModel) updated outside the optimizer, WGAN's weight clamping, weight
tying, warmup and cosine schedules (one run to a rate of 0), a GAN's two optimizers, a small
Transformer LM, a CNN with BatchNorm and dropout, transformers' GPT-2 from its config,
torchvision's ResNet-18 (when installed) and the CNN with a bias in front of each BatchNorm
(a note, not a finding). The health verdicts run every other check (`health_every=2`) so that
short runs meet them. The multi-seed, longer version is marked slow.
"""

from __future__ import annotations

import pytest
import torch

import gradcli
from watch_healthy import RUNS

#: The runs and their steps in the everyday suite (each well under a second watched).
STEPS = {name: 30 for name in RUNS}
STEPS.update(wgan_clamp=12, gpt2=12, resnet18=4, accumulation=20)


def _needs(name: str) -> None:
    if name == "resnet18":
        pytest.importorskip("torchvision")
    if name == "gpt2":
        pytest.importorskip("transformers")


def _same(plain: list[torch.nn.Module], watched: list[torch.nn.Module]) -> None:
    for a, b in zip(plain, watched):
        left, right = a.state_dict(), b.state_dict()
        assert list(left) == list(right)
        for key in left:
            assert torch.equal(left[key], right[key]), key  # bit for bit, buffers included


def _clean(name: str, steps: int, seed: int):
    plain = RUNS[name](steps, seed)
    with gradcli.watch(health_every=2) as w:
        watched = RUNS[name](steps, seed)
    result = w.result
    assert result.stop is None
    assert [(f.step, f.kind, f.parameters) for f in result.findings] == []  # warnings included
    assert result.ok
    assert result.checks > 0
    _same(plain, watched)
    return result


@pytest.mark.parametrize("name", list(RUNS))
def test_a_healthy_run_raises_nothing_and_keeps_its_weights(name):
    _needs(name)
    result = _clean(name, STEPS[name], 0)
    shifted = [n for n in result.notes if "bias=False would do" in n]
    assert bool(shifted) == (name in ("bias_before_batchnorm", "wgan_clamp")), result.notes


def test_the_biases_in_front_of_a_batchnorm_are_a_note_with_torchs_own_near_zero_gradients():
    """The note names exactly the biases whose gradient torch gives as zero up to rounding."""
    from watch_healthy import CNN, _data, _images

    torch.manual_seed(0)
    model = CNN(bias=True)
    x, y = _images(_data(0, 0))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    tiny = {name for name, p in model.named_parameters()
            if name.endswith("bias") and float(p.grad.norm()) < 1e-4 * float(model.get_parameter(
                name.rpartition(".")[0] + ".weight").grad.norm())}
    assert tiny == {"features.0.bias", "features.4.bias", "fc.bias"}
    result = _clean("bias_before_batchnorm", 4, 0)
    note = next(n for n in result.notes if "BatchNorm" in n)
    assert note.startswith("features.0.bias, features.4.bias, fc.bias: biases in front of a BatchNorm")


def test_the_wgan_critics_output_bias_gets_exactly_zero_from_torch_and_is_a_note():
    from watch_healthy import Critic

    torch.manual_seed(0)
    critic = Critic()
    (critic(torch.randn(8, 2)).mean() - critic(torch.randn(8, 2) + 1).mean()).backward()
    assert float(critic.net[2].bias.grad.abs().max()) == 0.0 and float(critic.net[2].weight.grad.norm()) > 0
    result = _clean("wgan_clamp", 4, 0)
    assert any(n.startswith("net.2.bias: the loss does not change") for n in result.notes), result.notes


#: A known false alarm of the global gradient-norm spike (z 8 and 3x the window's median, spikes.py):
#: fine-tuning with frozen BatchNorm, seed 1, step 25: 1.53 against a median of 0.47, z 8.3.
FALSE_ALARMS: dict[tuple[str, int], str] = {}  # (run, seed) -> why it is expected to fail: none today


@pytest.mark.slow
@pytest.mark.parametrize("name, seed", [
    pytest.param(name, seed, marks=pytest.mark.xfail(strict=True, reason=FALSE_ALARMS[name, seed]))
    if (name, seed) in FALSE_ALARMS else (name, seed) for name in RUNS for seed in (0, 1, 2)])
def test_a_healthy_run_raises_nothing_over_longer_runs_and_seeds(name, seed):
    _needs(name)
    _clean(name, 200 if name not in ("gpt2", "resnet18", "wgan_clamp") else 60, seed)



def test_watch_keeps_no_gradient_alive_after_zero_grad():
    """zero_grad() (set_to_none) frees the step's gradients under watch as without it: a detector
    that held them would keep a whole gradient set alive through the next forward."""
    import weakref

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with gradcli.watch(health_every=1):
        for _ in range(5):
            optimizer.zero_grad()
            model(torch.randn(16, 4)).pow(2).mean().backward()
            optimizer.step()
        grads = [weakref.ref(p.grad) for p in model.parameters()]
        optimizer.zero_grad()
        assert [g() for g in grads] == [None] * len(grads)
