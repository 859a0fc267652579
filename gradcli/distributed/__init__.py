"""Gradients on more than one process: the user's model on N ranks of torch.distributed (DDP
or FSDP2) against the same model on one process with the whole batch.

- `launch.py`: THE place that runs ranks (spawned here, or torchrun's), with timeouts and
  teardown; a rank's error ends the group with that rank's error.
- `setup.py`: what one run is (target, inputs, wrapping, fixes), as plain picklable data.
- `target.py`: the model, its inputs (a rank's shard) and its loss, made as `grads` makes them.
- `worker.py`: one rank's run: wrap, forward, backward, gather, return plain data.
- `syncbn.py`: a BatchNorm with global statistics for CPU (torch's SyncBatchNorm is GPU-only).
- `causes.py`: why the reduced gradients differ, each cause proven by rerunning with its fix.
- `result.py`, `run.py`: the result and the command's work (compare and grads).
"""
