"""A tiny causal language model, as a training script writes one: token embedding, learned
positions, an nn.TransformerEncoder with a causal mask, and an LM head. forward(ids) returns
logits [batch, time, vocab]; the loss line is the user's (README, "The loss line").

    gradcli trace examples/lm/tiny_lm.py:TinyLM --var "ids=randint(0, 50, (2, 8))" \
        --loss "cross_entropy(out[:, :-1].reshape(-1, 50), ids[:, 1:].reshape(-1))" --depth 1
"""

import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 50, dim: int = 16, heads: int = 2, layers: int = 2, context: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(context, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        steps = ids.shape[1]
        h = self.embed(ids) + self.position(torch.arange(steps, device=ids.device))
        mask = nn.Transformer.generate_square_subsequent_mask(steps, device=ids.device)
        h = self.encoder(h, mask=mask, is_causal=True)
        return self.head(self.norm(h))


class TinyLMOutput(dict):
    """What a transformers model returns, in miniature: a dict whose keys are also attributes."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class TinyLMWithOutput(TinyLM):
    """The same model returning an output object, as transformers models do: out.logits."""

    def forward(self, ids: torch.Tensor) -> TinyLMOutput:  # type: ignore[override]
        return TinyLMOutput(logits=super().forward(ids))
