"""What a user writes instead of `gradcli memory` on bench/mlp24.py: the same model, one forward
under a saved_tensors_hooks counter (each storage once), backward, and the total printed.

    python bench/memory_handwritten.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlp24 import MLP24, WIDTH  # noqa: E402

sizes = {}


def pack(tensor):
    storage = tensor.untyped_storage()
    sizes[storage.data_ptr()] = storage.nbytes()
    return tensor


torch.manual_seed(0)
model = MLP24()
x = torch.randn(64, WIDTH)
with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
    loss = model(x).pow(2).mean()
loss.backward()
print(f"saved for backward: {sum(sizes.values()):,} bytes in {len(sizes)} storages")
