"""When a gradient is vanishing or exploding: the thresholds and why they are what they are.

r = ‖grad‖/‖param‖ is the relative change one SGD step with lr=1 would make. Measured on
this machine (float32, default initialisation, mean-squared and cross-entropy losses, seeds
0-4; the table is in README "Gradient health"): healthy MLP, CNN, LSTM and
TransformerEncoderLayer models and a He-initialised 40-layer MLP have r between 9e-4 and 6
per parameter (up to 7e2 with a sum-reduced loss), within 0.05x-110x of their own median;
a 40-layer plain MLP at 1.5x He's scale has weights at r = 1.5e5-3e14, at 0.5x He's scale
6e-15-1.4e-12: a plain ReLU MLP's weight gradients are off alike in every layer, so only
absolute bounds find those two, while one layer far from the rest is found against the
median (used only when the median itself is within the bounds).

- vanish = 1e-7: below float32's relative precision (1.19e-7), an SGD step with lr ≤ 1
  changes the weights by less than their rounding: it is lost entirely.
- explode = 1e4: one step at lr = 1e-4 would move the weights by their own size.
- spread = 1e4: r more than 10^4 times below or above the model's median (healthy models
  stay within about 10^2 of it), checked when at least 3 parameters have a ratio.
- the healthy band, 3e-4 to 1e3: every parameter of the healthy models above had r in it,
  measured again (the four healthy models with out.pow(2).mean(), cross-entropy and
  out.pow(2).sum(), the He-initialised MLP with a target's mean square; seeds 0-4): the lowest 3.9e-4 (the LSTM's weight_hh_l0 with
  out.pow(2).mean(); 8.9e-4 with a target), the highest 7.1e2 (the CNN with the sum over 10
  outputs), each rounded outwards. A parameter outside it is unlike any of them. It decides
  which side is off when the median rule splits a model in two: in a TransformerEncoderLayer
  whose loss is the mean square of norm2's output, norm2 has r = 0.05-0.3 and the ten
  parameters before it 1e-7-1.2e-4 (the output is normalised: the loss barely depends on
  them), so norm2 is 10^5x over the median; the band says the ten vanish, not that norm2
  explodes. Not an option: it is what healthy models measure, not a taste.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError

#: ‖grad‖/‖param‖ of every parameter of the healthy models, rounded outwards (see above).
HEALTHY_LOW = 3e-4
HEALTHY_HIGH = 1e3


@dataclass(frozen=True)
class Thresholds:
    vanish: float = 1e-7
    explode: float = 1e4
    spread: float = 1e4

    def __post_init__(self) -> None:
        for name in ("vanish", "explode", "spread"):
            value = getattr(self, name)
            if not (value > 0 and value < float("inf")):
                raise UsageError(f"--{name} must be a positive finite number, not {value}")
        if self.vanish >= self.explode:
            raise UsageError(f"--vanish ({self.vanish:g}) must be below --explode ({self.explode:g})")
        if self.spread <= 1:
            raise UsageError(f"--spread must be above 1, not {self.spread:g}")
