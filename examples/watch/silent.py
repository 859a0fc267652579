"""A small classifier's training loop with a silent bug to choose: no nan, no exception, and the
run learns wrong. What `gradcli watch` is shown finding in the docs (and tested on).

    python examples/watch/silent.py --bug no_zero_grad          # the loss climbs, nothing is said
    gradcli watch examples/watch/silent.py --bug no_zero_grad  # found, with its line and the fix

Written top to bottom, as many training scripts are (no `if __name__ == "__main__":`). The bugs:
  none          the loop as it should be
  no_zero_grad  optimizer.zero_grad() forgotten: each step adds the old gradients again
  head_left_out the optimizer built from model.body.parameters(): the head never moves
  plain_list    the hidden layers kept in a Python list: model.parameters() does not see them
  zero_between  zero_grad() called between backward() and step(): the step sees no gradient
  softmax       nn.Softmax as the model's last layer, before cross_entropy (softmax twice)
  broadcast     a regression head [N, 1] against a target [N] in mse_loss
  eval          model.eval() for a validation pass, and no model.train() after it
  scheduler     an epoch scheduler (StepLR, step_size=10) stepped after every batch
  clip_scaled   float16 autocast with a GradScaler, gradients clipped before scaler.unscale_()
  clip_value    the same with clip_grad_value_
  reinit        the head re-initialised every step (an init call left inside the loop)
  constant      every weight initialised to one constant: the hidden units stay copies of one
"""

import argparse

import torch
from torch import nn

BUGS = ("none", "no_zero_grad", "head_left_out", "plain_list", "zero_between", "softmax", "broadcast", "eval",
        "scheduler", "clip_scaled", "clip_value", "reinit", "constant")

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--bug", choices=BUGS, default="none")
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()
bug = args.bug


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        hidden = [nn.Linear(8, 32), nn.Linear(32, 32)]
        self.layers = hidden if bug == "plain_list" else nn.ModuleList(hidden)
        self.dropout = nn.Dropout(0.1)
        self.head = nn.Linear(32, 1 if bug == "broadcast" else 3)
        self.out = nn.Softmax(dim=1) if bug == "softmax" else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.out(self.head(self.dropout(x)))


torch.manual_seed(0)
inputs = torch.randn(1024, 8)
labels = (inputs[:, 0] > 0).long() + (inputs[:, 1] > 0).long()
model = Net()
if bug == "constant":
    for p in model.parameters():
        nn.init.constant_(p, 0.1)
trained = model.layers.parameters() if bug == "head_left_out" else model.parameters()
optimizer = torch.optim.SGD(trained, lr=0.05, momentum=0.9)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.1)
scaler = torch.amp.GradScaler("cpu", enabled=bug in ("clip_scaled", "clip_value"))

for epoch in range(args.epochs):
    for batch in range(32):
        rows = torch.randint(0, 1024, (32,))
        x, y = inputs[rows], labels[rows]
        if bug != "no_zero_grad" and bug != "zero_between":
            optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16, enabled=scaler.is_enabled()):
            if bug == "broadcast":
                loss = nn.functional.mse_loss(model(x), x[:, 0])
            else:
                loss = nn.functional.cross_entropy(model(x), y)
        if not scaler.is_enabled():
            loss.backward()
            if bug == "zero_between":
                optimizer.zero_grad()
            optimizer.step()
        else:  # float16 with a GradScaler, clipped (the bug: before scaler.unscale_(optimizer))
            scaler.scale(loss).backward()
            if bug == "clip_scaled":
                nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            else:
                nn.utils.clip_grad_value_(model.parameters(), clip_value=0.5)
            scaler.step(optimizer)
            scaler.update()
        if bug == "reinit":
            nn.init.xavier_uniform_(model.head.weight)
        if bug == "scheduler":
            scheduler.step()
    if bug != "scheduler" and epoch % 10 == 9:
        scheduler.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(inputs).argmax(1) == labels).float().mean()
    if bug != "eval":
        model.train()
    print(f"epoch {epoch}: loss {loss.item():.4g}, accuracy {accuracy:.3f}")
