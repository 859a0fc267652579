"""Watch inside the trainers people use: `gradcli.callbacks.LightningCallback(**options)` for
Lightning's `Trainer`, `gradcli.callbacks.TrainerCallback(**options)` for Hugging Face's.

    trainer = lightning.Trainer(callbacks=[gradcli.callbacks.LightningCallback()])
    trainer.fit(model)            # raises gradcli.WatchStop before a non-finite update

The options are `gradcli.watch`'s. Each class is imported when first named, so that neither
`import gradcli` nor the other trainer's callback pays for lightning or transformers.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["LightningCallback", "TrainerCallback"]

_LAZY = {
    "LightningCallback": "gradcli.callbacks.lightning",
    "TrainerCallback": "gradcli.callbacks.huggingface",
}


def __getattr__(name: str) -> Any:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'gradcli.callbacks' has no attribute {name!r}") from None
    return getattr(import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
