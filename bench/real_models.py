"""The real architectures of the bench (torchvision's ResNet-18, a 2-layer GPT-2 from
transformers' config) and gradcli's command lines for them, without importing torch.

`run.py` reads the command lines and asks whether torchvision, transformers and torchviz are
installed (`installed`, which finds a package without importing it: see model_args.py on why
run.py must not import torch). The scripts that a user would run instead (torchviz_real.py,
handwritten_grads_resnet.py) build the same model, inputs and loss with the same seed as
`gradcli ... --seed 0`: torch.manual_seed(0) before the model is made, the inputs drawn from
their own torch.Generator seeded 0.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

SEED = 0
RESNET = "torchvision.models:resnet18"
RESNET_INPUT = (2, 3, 32, 32)
GPT2_LAYERS = 2
GPT2_TOKENS = (2, 16)  # batch, sequence: token ids drawn from the whole GPT-2 vocabulary
GPT2_VOCAB = 50257

RESNET_ARGS = [
    RESNET, "--var", f"x=randn{RESNET_INPUT}".replace(" ", ""), "--loss", "out.pow(2).mean()", "--seed", str(SEED),
]
GPT2_ARGS = [
    f"{Path(__file__).with_name('real_models.py')}:gpt2",
    "--var", f"input_ids=randint(0,{GPT2_VOCAB},{GPT2_TOKENS})".replace(" ", ""),
    "--loss", "logits.pow(2).mean()", "--seed", str(SEED),
]


def installed(*packages: str) -> list[str]:
    """Those of `packages` that are not installed (found, not imported)."""
    return [name for name in packages if importlib.util.find_spec(name) is None]


def gpt2():
    """A 2-layer GPT-2 language model, GPT2Config's other sizes as published (768 wide, 12
    heads, the 50,257-token vocabulary), randomly initialised: nothing is downloaded."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=GPT2_LAYERS))


def resnet_and_loss():
    """ResNet-18 and its loss, as `gradcli trace/grads RESNET_ARGS` builds them."""
    import torch
    import torchvision

    torch.manual_seed(SEED)
    model = torchvision.models.resnet18()
    # gradcli's randn draws in float64 and converts (interpret/constructors.py): the same numbers
    x = torch.randn(RESNET_INPUT, generator=torch.Generator().manual_seed(SEED), dtype=torch.float64).float()
    return model, model(x).pow(2).mean()


def gpt2_and_loss():
    """The 2-layer GPT-2 and its loss, as `gradcli trace GPT2_ARGS` builds them."""
    import torch

    torch.manual_seed(SEED)
    model = gpt2()
    ids = torch.randint(0, GPT2_VOCAB, GPT2_TOKENS, generator=torch.Generator().manual_seed(SEED))
    return model, model(input_ids=ids).logits.pow(2).mean()
