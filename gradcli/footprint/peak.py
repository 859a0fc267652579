"""The measured peak of tensor memory during one forward + backward.

What "measured" means here, honestly:

- On CPU, torch's CPU allocator reports every allocation and free to the autograd profiler
  when memory profiling is on (c10's ProfiledCPUMemoryReporter). The legacy profiler is used
  because it is quiet (Kineto logs to stderr on a machine without a GPU) and cheap: it only
  collects the events, and nothing here parses them into a table. The running sum of those
  events is the tensor bytes allocated during the run and still live; its highest point is
  the peak *above* what was live when forward began (the parameters, buffers and inputs,
  which `baseline` adds back). This is exact for tensors; it does not see the Python heap,
  or the memory the C allocator keeps after a free (both show in the process's RSS, whose
  high-water mark `ru_maxrss` only ever grows and so cannot show a single run's peak once
  the process has been larger before).
- On CUDA, the caching allocator's own `max_memory_allocated`, reset before the run.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

from .kinds import own_bytes, storage_of

#: c10's CPU allocator logs this (to fd 2, once per 1,000) when a tensor made before the
#: profiler started is freed while it runs: expected here, and no news to the user.
_ALLOCATOR_NOISE = b"Memory block of unknown size was allocated before the profiling started"


class PeakMeter:
    """Context manager around forward + backward; afterwards `.peak` (bytes above the start)
    and `.end` (bytes still live at the end, above the start); `.how` says which measure."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.peak: int | None = None
        self.end: int | None = None
        self.how = "none"
        self._start = 0

    def __enter__(self) -> "PeakMeter":
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
            self.how = "cuda"
        elif self.device.type == "cpu":
            from torch.autograd import profiler_legacy

            if not torch._C._autograd._profiler_enabled():  # a profiler of the user's own is running
                config = profiler_legacy.profile(profile_memory=True).config()
                self._stderr = _FilteredStderr()
                torch._C._autograd._enable_profiler_legacy(config)
                self.how = "cpu"
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch

        if self.how == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device) - self._start
            self.end = torch.cuda.memory_allocated(self.device) - self._start
        elif self.how == "cpu":
            threads = torch._C._autograd._disable_profiler_legacy()
            self._stderr.close()
            events = sorted(
                ((e.start_us(), e.cpu_memory_usage()) for thread in threads for e in thread if e.kind() == "memory_alloc"),
                key=lambda pair: pair[0],
            )
            live = peak = 0
            for _, change in events:
                live += change
                peak = max(peak, live)
            self.peak, self.end = peak, live


def tensor_bytes(tensors: Any) -> int:
    """The bytes of the distinct storages behind `tensors`."""
    seen: dict[int, int] = {}
    for tensor in tensors:
        storage = storage_of(tensor)
        if storage is not None:
            seen[storage.data_ptr()] = storage.nbytes()
        else:
            seen[id(tensor)] = own_bytes(tensor)
    return sum(seen.values())


class _FilteredStderr:
    """File descriptor 2 into a temporary file meanwhile; on close, what was written there goes
    to the real stderr, less c10's allocator notice (a C++ log line Python cannot silence)."""

    def __init__(self) -> None:
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)

    def close(self) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        kept = b"".join(line for line in self._file.read().splitlines(keepends=True) if _ALLOCATOR_NOISE not in line)
        self._file.close()
        if kept:
            os.write(2, kept)
