"""When a gradient is vanishing or exploding: the thresholds and why they are what they are.

r = ‖grad‖/‖param‖ is the relative change one SGD step with lr=1 would make. Measured on
this machine (float32, default initialisation, mean-reduced losses; README "Gradient
health"): healthy MLP, CNN, LSTM and TransformerEncoderLayer models have r between 3e-3 and 5
per parameter (up to 7e2 with a sum-reduced loss), within 0.06x-100x of their own median;
a 40-layer plain MLP at 1.5x He's scale has r ≈ 1e12 everywhere, at 0.5x He's scale r ≈ 2e-14
everywhere: a plain ReLU MLP's weight gradients are uniformly off, so only absolute bounds
find those two, while one layer far from the rest is found against the median.

- vanish = 1e-7: below float32's relative precision (1.19e-7), an SGD step with lr ≤ 1
  changes the weights by less than their rounding: it is lost entirely.
- explode = 1e4: one step at lr = 1e-4 would move the weights by their own size.
- spread = 1e4: r more than 10^4 times below or above the model's median (healthy models
  stay within about 10^2 of it), checked when at least 3 parameters have a ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError


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
