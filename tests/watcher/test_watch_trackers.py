"""The step log where the run already logs, read back with tensorboard's own reader
(EventAccumulator): `gradcli watch --tensorboard DIR` on a plain script, Lightning's
TensorBoardLogger through LightningCallback, and the HF Trainer's `report_to="tensorboard"`
through TrainerCallback's `on_log`.

The truth: the same runs without gradcli, each layer's gradient norm computed by torch from
`p.grad` right before each update (the root of the sum of its parameters' squared norms), and
the step at which a layer's gradients are all zero.
"""

from __future__ import annotations

import logging
import math
import warnings

import pytest
import torch
from paths import ROOT

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from watch_truths import EXAMPLE, load_example  # noqa: E402

from gradcli.watcher.options import WatchOptions  # noqa: E402
from gradcli.watcher.run import watch_script  # noqa: E402
from gradcli.watcher.script import Script  # noqa: E402

T = load_example("watch_trackers_example")
AT, STEPS = 4, 8


def events(folder) -> EventAccumulator:
    found = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    found.Reload()
    return found


def layer_norms(model: torch.nn.Module, prefix: str = "") -> dict[str, float]:
    """torch: each module's gradient norm, from the grads of its own parameters."""
    norms: dict[str, float] = {}
    for name, module in model.named_modules():
        own = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]
        if own:
            norms[prefix + name] = math.sqrt(sum(float(g.pow(2).sum()) for g in own))
    return norms


def test_tensorboard_holds_each_layers_norm_and_the_finding_at_its_step(tmp_path):
    truth: dict[int, dict[str, float]] = {}
    zero: dict[int, bool] = {}

    def before(step, model, loss):
        truth[step] = layer_norms(model)
        zero[step] = not bool(model.fc1.weight.grad.any())

    T.train("mlp", "dead", STEPS, AT, before_step=before)
    result = watch_script(Script(str(EXAMPLE), None, ("--fault", "dead", "--at", str(AT), "--steps", str(STEPS))),
                          WatchOptions(tensorboard=tmp_path / "tb"))
    assert result.stop is None
    read = events(tmp_path / "tb")
    for layer in ("fc1", "proj", "head"):
        logged = {e.step: e.value for e in read.Scalars(f"gradcli/layer/{layer}")}
        assert sorted(logged) == list(range(1, STEPS + 1))
        for step, value in logged.items():
            assert value == pytest.approx(truth[step][layer], rel=1e-5, abs=1e-7)
    first_zero = min(s for s, z in zero.items() if z)
    assert all(zero[s] for s in range(first_zero, STEPS + 1))  # torch: dead from there on
    texts = [(e.step, e.tensor_proto.string_val[0].decode()) for e in read.Tensors("gradcli/finding/text_summary")]
    assert len(texts) == 1 and texts[0][0] == first_zero and "dead" in texts[0][1] and "fc1.weight" in texts[0][1]


def test_lightnings_logger_gets_the_layer_norms_from_the_callback(tmp_path):
    L = pytest.importorskip("lightning")
    from lightning.pytorch.loggers import TensorBoardLogger

    from gradcli.callbacks import LightningCallback

    import importlib.util

    spec = importlib.util.spec_from_file_location("lit_train_trackers",
                                                  ROOT / "examples/watch/lit_train.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    class Truth(L.Callback):
        norms: list[dict[str, float]] = []

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            self.norms.append(layer_norms(pl_module))

    def fit(callback, folder):
        for name in ("lightning.pytorch", "lightning.fabric"):
            logging.getLogger(name).setLevel(logging.ERROR)
        torch.manual_seed(0)
        model = script.Net()
        logger = TensorBoardLogger(str(folder), name="", version="")
        trainer = L.Trainer(max_epochs=1, callbacks=[callback], accelerator="cpu", logger=logger, log_every_n_steps=2,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(model, script.data(False))

    truth = Truth()
    fit(truth, tmp_path / "plain")
    fit(LightningCallback(), tmp_path / "watched")
    logged = {e.step: e.value for e in events(tmp_path / "watched").Scalars("gradcli/layer/net.1")}
    # every second update (log_every_n_steps=2), at its optimizer step counted from 1
    assert sorted(logged) == [s for s in range(1, len(truth.norms) + 1) if s % 2 == 0]
    for step, value in logged.items():
        assert value == pytest.approx(truth.norms[step - 1]["net.1"], rel=1e-5, abs=1e-7)


def test_the_hf_trainers_report_to_gets_the_numbers_through_on_log(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from gradcli.callbacks import TrainerCallback

    import importlib.util

    spec = importlib.util.spec_from_file_location("hf_train_trackers",
                                                  ROOT / "examples/watch/hf_train.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    transformers.logging.set_verbosity_error()

    class Truth(transformers.TrainerCallback):
        norms: list[dict[str, float]] = []

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            self.norms.append(layer_norms(model))

    def train(callback, folder):
        torch.manual_seed(0)
        config = transformers.GPT2Config(vocab_size=64, n_positions=script.LENGTH, n_embd=32, n_layer=2, n_head=2,
                                         bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(config)
        args = transformers.TrainingArguments(output_dir=str(folder), per_device_train_batch_size=script.BATCH,
                                              num_train_epochs=1, report_to=["tensorboard"], logging_steps=2,
                                              save_strategy="no", use_cpu=True, seed=0,
                                              disable_tqdm=True, max_grad_norm=0)
        transformers.Trainer(model=model, args=args, train_dataset=script.Tokens(False),
                             compute_loss_func=script.masked_mean, callbacks=[callback]).train()

    truth = Truth()
    train(truth, tmp_path / "plain")
    train(TrainerCallback(), tmp_path / "watched")
    read = events(next((tmp_path / "watched").rglob("events.out.tfevents.*")).parent)
    key = next(k for k in read.Tags()["scalars"] if k.endswith("gradcli/layer/transformer.h.0.mlp.c_fc"))
    logged = {e.step: e.value for e in read.Scalars(key)}
    assert sorted(logged) == [s for s in range(1, len(truth.norms) + 1) if s % 2 == 0]  # the Trainer's logging_steps
    for step, value in logged.items():  # the latest checked step's numbers, logged at the Trainer's step
        assert value == pytest.approx(truth.norms[step - 1]["transformer.h.0.mlp.c_fc"], rel=1e-4, abs=1e-6)
