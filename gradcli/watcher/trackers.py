"""The step log where the run already logs: TensorBoard (`gradcli watch --tensorboard DIR`),
Lightning's `trainer.logger` (through LightningCallback) and the HF Trainer's `on_log` (through
TrainerCallback, so that `report_to` sends it to TensorBoard or W&B).

Each tracker gets steplog.py's record of a checked step (the loss, the gradient norm, each
layer's gradient norm, the spike statistic, Adam's ratios) and the findings made since the
last one; a finding is written as text at its own step where the tracker takes text. A
trainer's tracker writes no more often than the trainer's own logging interval (`wants`), so
that a record is built only for a step that is written.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .kinds import WORDS

PREFIX = "gradcli"


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """A step record's numbers under tracker keys: gradcli/loss, gradcli/layer/fc1, ..."""
    found: dict[str, Any] = {f"{PREFIX}/{key}": record[key] for key in ("loss", "grad_norm", "loss_z", "grad_z")}
    found.update((f"{PREFIX}/layer/{layer or 'model'}", norm) for layer, norm in record["layers"].items())
    found.update((f"{PREFIX}/adam_ratio/{layer or 'model'}", ratio) for layer, ratio in record["adam_ratios"].items())
    return {key: float(value) for key, value in found.items() if value is not None}  # float("nan") reads "nan"


def finding_text(finding: Any) -> str:
    """A finding as a tracker's text: what it is, where, and its numbers."""
    where = f" on {', '.join(finding.parameters)}" if finding.parameters else ""
    numbers = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) and math.isfinite(v) else f"{k} {v}"
                        for k, v in finding.detail.items())
    return f"step {finding.step}: {WORDS[finding.kind].sentence}{where}" + (f" ({numbers})" if numbers else "")


class TensorBoardTracker:
    """Event files in `folder` (torch.utils.tensorboard), every checked step."""

    def __init__(self, folder: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(folder))

    def wants(self, step: int) -> bool:
        return True

    def step(self, record: dict[str, Any], findings: list[Any]) -> None:
        for key, value in scalars(record).items():
            self.writer.add_scalar(key, value, record["step"])
        for finding in findings:
            self.writer.add_text(f"{PREFIX}/finding", finding_text(finding), finding.step)

    def close(self) -> None:
        self.writer.close()


class LightningTracker:
    """`trainer.logger.log_metrics` at the trainer's `log_every_n_steps`, findings as text where
    the logger's experiment takes it (TensorBoard's `add_text`); each at its optimizer step
    counted from 1, as `gradcli watch` counts it (the update it was checked before)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def wants(self, step: int) -> bool:
        return getattr(self.trainer, "logger", None) is not None and step % max(1, self.trainer.log_every_n_steps) == 0

    def step(self, record: dict[str, Any], findings: list[Any]) -> None:
        logger = getattr(self.trainer, "logger", None)
        if logger is None:
            return
        if self.wants(record["step"]):
            logger.log_metrics(scalars(record), step=record["step"])
        add_text = getattr(getattr(logger, "experiment", None), "add_text", None)
        for finding in findings:
            if add_text is not None:
                add_text(f"{PREFIX}/finding", finding_text(finding), finding.step)

    def close(self) -> None:
        return None  # the trainer owns its logger


class LatestTracker:
    """The latest record's numbers and the findings since the last `take()`: the HF Trainer's
    `on_log` puts them into the logs it is about to send (its own interval)."""

    def __init__(self) -> None:
        self.latest: dict[str, float] = {}
        self.findings: list[str] = []

    def wants(self, step: int) -> bool:
        return True

    def step(self, record: dict[str, Any], findings: list[Any]) -> None:
        self.latest = scalars(record)
        self.findings += [finding_text(f) for f in findings]

    def take(self) -> tuple[dict[str, float], list[str]]:
        taken = self.latest, self.findings
        self.latest, self.findings = {}, []
        return taken

    def close(self) -> None:
        return None
