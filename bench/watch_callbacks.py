"""What gradcli's trainer callbacks cost a training step, side by side with the same fit unwatched.

    python bench/watch_callbacks.py                  # Lightning and the HF Trainer, 40 timed steps a block
    python bench/watch_callbacks.py --trainers lightning --steps 60 --rounds 5

One process; for each trainer the same fit runs in alternating blocks: without a gradcli
callback, then with `LightningCallback()` / `TrainerCallback()` checking every step, repeated
`--rounds` times so that drift in the machine's load falls on both sides alike. Each step is
timed by a small timing callback of the trainer itself (batch start to batch end, or step begin
to step end), the first block of each side is a warm-up, and the figure is the median step time
of each side over its other blocks; the ratio is watched / unwatched. Each block builds its
model anew, and a model's own speed differs by a few percent from one instance to the next
(where its tensors land; bench/watch.py measured 3 to 4%), so a few blocks leave that spread in
the ratio; beside it, the mean time spent inside watch's own hooks per watched step
(bench/watch.py's `timed_hooks`, with the callback's `check_step`; every step is checked), over
the unwatched median step, has none of it. The models: bench/mlp24.py's 24-layer MLP in a
LightningModule (width 1024, batch 64, Adam), and a small GPT-2 from its config (2 layers, 2x64
tokens, AdamW) in the HF Trainer; each is skipped with the reason when its package is missing.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.filterwarnings("ignore")

from watch import timed_hooks  # noqa: E402 - bench/ is on the path from the line above


def lightning_block(steps: int, watched: bool) -> list[float]:
    import lightning as L

    from gradcli.callbacks import LightningCallback
    from mlp24 import MLP24

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = MLP24()

        def training_step(self, batch, index):
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-4)

    times: list[float] = []

    class Timer(L.Callback):
        def on_train_batch_start(self, *args):
            self.started = time.perf_counter()

        def on_train_batch_end(self, *args):
            times.append(time.perf_counter() - self.started)

    x = torch.randn(64 * steps, 1024)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=64)
    callbacks = [Timer()] + ([LightningCallback(health_every=0)] if watched else [])
    logging.getLogger("lightning").setLevel(logging.ERROR)
    trainer = L.Trainer(max_epochs=1, callbacks=callbacks, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Module(), data)
    return times


def hf_block(steps: int, watched: bool) -> list[float]:
    import transformers

    from gradcli.callbacks import TrainerCallback

    times: list[float] = []

    class Timer(transformers.TrainerCallback):
        def on_step_begin(self, *args, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            times.append(time.perf_counter() - self.started)

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return 2 * steps

        def __getitem__(self, i):
            ids = torch.randint(0, 50257, (64,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2))
    logging.getLogger("transformers").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(output_dir=out, per_device_train_batch_size=2, num_train_epochs=1,
                                              report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True,
                                              logging_steps=10 ** 6)
        callbacks = [Timer()] + ([TrainerCallback(health_every=0)] if watched else [])
        transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=callbacks).train()
    return times


TRAINERS = {"lightning": lightning_block, "hf": hf_block}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trainers", nargs="+", default=list(TRAINERS), choices=list(TRAINERS))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'trainer':10} {'unwatched ms':>13} {'watched ms':>11} {'ratio':>6} {'hooks ms':>9} {'ratio':>6}")
    for name in args.trainers:
        spent: dict[int, float] = {}
        undo = timed_hooks(spent)
        try:
            block = TRAINERS[name]
            sides: dict[bool, list[float]] = {False: [], True: []}
            for round_ in range(args.rounds + 1):
                for watched in (False, True):
                    if round_ == 1 and not watched:
                        spent.clear()  # the warm-up round's hooks are not counted
                    times = block(args.steps, watched)
                    if round_:  # the first round warms up
                        sides[watched] += times
        except ImportError as err:
            print(f"{name:10} skipped: {err}")
            continue
        finally:
            undo()
        plain, watched = statistics.median(sides[False]), statistics.median(sides[True])
        hooks = sum(spent.values()) / len(sides[True])
        print(f"{name:10} {plain * 1e3:13.2f} {watched * 1e3:11.2f} {watched / plain:6.3f} {hooks * 1e3:9.2f} "
              f"{1 + hooks / plain:6.3f}")


if __name__ == "__main__":
    main()
