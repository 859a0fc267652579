"""A Hugging Face Trainer run (a small GPT-2 from its config, no download), watched every way
(tests/watcher/test_watch_joined.py runs each):

    python examples/watch/hf_train.py --callback --bad          # the callback alone: report, WatchStop
    gradcli watch examples/watch/hf_train.py --callback --bad   # the callback joins the command's watch
    gradcli watch examples/watch/hf_train.py --bad              # no callback: the step pre-hook

    --callback   Trainer(callbacks=[gradcli.callbacks.TrainerCallback()])
    --with       the training inside `with gradcli.watch():`
    --bad        sample 13's labels are all -100: the loss function's masked mean is 0/0 on it
"""

import sys
import tempfile

import torch
import transformers

import gradcli

SAMPLES, BATCH, LENGTH, MASKED = 24, 4, 12, 13


def masked_mean(outputs, labels, num_items_in_batch=None):
    """The Trainer's compute_loss_func: each sample's mean token loss over its labelled tokens."""
    logits, target = outputs.logits[:, :-1], labels[:, 1:]
    mask = (target != -100).float()
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.clamp(min=0).reshape(-1),
                                           reduction="none").view(target.shape)
    return ((ce * mask).sum(1) / mask.sum(1)).mean()  # 0/0 for a sample with no labelled token


class Tokens(torch.utils.data.Dataset):
    def __init__(self, bad):
        self.ids = torch.randint(0, 64, (SAMPLES, LENGTH), generator=torch.Generator().manual_seed(0))
        self.bad = bad

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        labels = self.ids[i].clone()
        if self.bad and i == MASKED:
            labels[:] = -100
        return {"input_ids": self.ids[i], "labels": labels}


def train(callbacks, bad):
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=LENGTH, n_embd=32, n_layer=2, n_head=2,
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(output_dir=out, per_device_train_batch_size=BATCH, num_train_epochs=1,
                                              report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True)
        transformers.Trainer(model=model, args=args, train_dataset=Tokens(bad), compute_loss_func=masked_mean,
                             callbacks=callbacks).train()
    return model


if __name__ == "__main__":
    callbacks = [gradcli.callbacks.TrainerCallback()] if "--callback" in sys.argv else []
    if "--with" in sys.argv:
        with gradcli.watch() as watch:  # (the test reads watch.result from the script's globals)
            train(callbacks, "--bad" in sys.argv)
    else:
        train(callbacks, "--bad" in sys.argv)
