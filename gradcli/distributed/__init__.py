"""Gradients on more than one process: the user's model on N ranks of torch.distributed (DDP
or FSDP2) against the same model on one process with the whole batch.

- `launch.py`: THE place that runs ranks (spawned here, or torchrun's), with timeouts and
  teardown; a rank's error ends the group with that rank's error.
- `setup.py`: what one run is (target, inputs, wrapping, fixes), as plain picklable data.
- `target.py`: the model, its inputs (a rank's shard) and its loss, made as `grads` makes them.
- `reference.py`: the same model on one process with the whole batch.
- `worker.py`: one rank's run: wrap, forward, backward, gather, return plain data.
- `judge.py`: the ranks' gradients against the reference (comparison/gradients.py), and between ranks.
- `syncbn.py`: a BatchNorm with global statistics for CPU (torch's SyncBatchNorm is GPU-only).
- `causes.py`: why the reduced gradients differ, each cause proven by rerunning with its fix.
- `result.py`, `run.py`: the result and `compare --ddp/--fsdp`'s work; `grads.py`: `grads --ddp`.

XXX `--device cuda` (nccl, one GPU per rank) is written but was never run here (no GPU): the
reference then runs on the CPU, and TF32 convolutions on the ranks may exceed float32's tolerance.
"""
