"""What a watched run does besides its steps, noted at the user's line: the methods it calls
(methods.py: optimizers and schedulers built, zero_grad, eval) and, during its first step, the
torch functions that made its loss (opsites.py). The detectors read them to name a line."""

from .methods import RunEvents, Site
from .opsites import OpSites

__all__ = ["OpSites", "RunEvents", "Site"]
