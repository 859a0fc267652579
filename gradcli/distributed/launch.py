"""THE place that runs ranks (STYLE.md rule 21): N worker processes spawned here, or the ranks
`torchrun` already started. Everything else hands a job (a picklable callable of `(rank,
world)`) to `Ranks.run` and gets back each rank's plain data, in rank order.

Spawned ranks (torch.multiprocessing's forkserver context, torch imported once in the server;
spawn where there is none) listen for jobs on their own queue, so
one process group serves the run and every rerun with a fix (starting a group costs seconds:
each rank imports torch). Nothing is left behind: a rank that raises ends the group with THAT
rank's error (its frames when they are the user's code), a rank that dies or a run that
outlives the timeout ends it too, and teardown terminates, then kills, every rank still there.

Under torchrun (RANK and WORLD_SIZE in the environment) the launcher's ranks are used as they
are (env:// rendezvous, across nodes too); each rank runs the same job and the results are
gathered to all (`all_gather_object`), so every rank takes the same decisions from the same data.
"""

from __future__ import annotations

import abc
import datetime
import os
import queue
import socket
import sys
import time
from typing import Any, Callable, Sequence

from ..errors import GradcliError, UsageError

#: Seconds a job may run on the ranks before the group is ended (a hung collective, a deadlock).
TIMEOUT = 600.0
#: Seconds a rank gets to leave on its own at teardown before it is terminated, then killed.
GRACE = 5.0

Job = Callable[[int, int], Any]


class RankError(GradcliError):
    """A rank raised, died or timed out: the group ended with that rank's error."""

    def __init__(self, message: str, *, rank: int | None = None, hint: str | None = None, pids: Sequence[int] = ()) -> None:
        super().__init__(message, hint=hint)
        self.rank = rank
        self.pids = tuple(pids)  # the ranks' processes, all ended by the time this is raised


def under_torchrun() -> bool:
    """Whether a launcher (torchrun, torch.distributed.run) started this process as a rank."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def start_ranks(world: int, backend: str = "gloo", timeout: float = TIMEOUT) -> "Ranks":
    """The ranks of this run: torchrun's if it launched us, else `world` spawned processes."""
    if under_torchrun():
        launched = int(os.environ["WORLD_SIZE"])
        if world != launched:
            raise UsageError(f"--ddp/--fsdp asks for {world} ranks, and torchrun started {launched}",
                             hint=f"give --ddp {launched} (or --fsdp {launched}) under this launcher")
        return LaunchedRanks(backend, timeout)
    return SpawnedRanks(world, backend, timeout)


class Ranks(abc.ABC):
    """A process group of `world` ranks that runs jobs; a context manager that tears it down."""

    world: int
    rank: int = 0  # this process's rank: 0 for the parent of spawned ranks
    pids: tuple[int, ...] = ()

    @abc.abstractmethod
    def run(self, job: Job) -> list[Any]:
        """Run `job` on every rank; each rank's answer, in rank order."""

    def agree(self, value: Any) -> Any:
        """Rank 0's `value` on every rank (a seed each torchrun rank drew on its own)."""
        return value

    @abc.abstractmethod
    def close(self, abort: bool = False) -> None:
        """End the ranks: let them finish (or, with `abort`, stop them now)."""

    def __enter__(self) -> "Ranks":
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        # Leaving on an error (bad input found while the ranks start, Ctrl-C): end them now.
        self.close(abort=kind is not None)


class SpawnedRanks(Ranks):
    def __init__(self, world: int, backend: str, timeout: float) -> None:
        import torch.multiprocessing as mp

        self.world, self.timeout = world, timeout
        self._closed = False
        context = _rank_context(mp)
        self._outbox = context.Queue()
        self._inboxes = [context.Queue() for _ in range(world)]
        port = free_port()
        self._processes = [
            context.Process(target=serve, args=(rank, world, port, backend, timeout, self._inboxes[rank], self._outbox,
                                                  dict(os.environ)),
                            daemon=True, name=f"gradcli-rank-{rank}")
            for rank in range(world)
        ]
        for process in self._processes:
            process.start()
        self.pids = tuple(p.pid for p in self._processes if p.pid is not None)

    def run(self, job: Job) -> list[Any]:
        for inbox in self._inboxes:
            inbox.put(job)
        results: dict[int, Any] = {}
        deadline = time.monotonic() + self.timeout
        while len(results) < self.world:
            try:
                rank, ok, payload = self._outbox.get(timeout=0.1)
            except queue.Empty:
                self._check_alive(results, deadline)
                continue
            if not ok:
                self._end()
                message, hint = payload
                raise RankError(message, rank=rank, hint=hint, pids=self.pids)
            results[rank] = payload
        return [results[r] for r in range(self.world)]

    def _check_alive(self, results: dict[int, Any], deadline: float) -> None:
        for rank, process in enumerate(self._processes):
            if rank not in results and not process.is_alive():
                try:  # it may have reported just before it ended
                    got = self._outbox.get(timeout=1.0)
                except queue.Empty:
                    got = None
                self._end()
                if got is not None and not got[1]:
                    raise RankError(got[2][0], rank=got[0], hint=got[2][1], pids=self.pids)
                raise RankError(f"rank {rank} ended with exit code {process.exitcode} before it reported",
                                rank=rank, hint="a crash in native code or os._exit in the model ends a rank this way",
                                pids=self.pids)
        if time.monotonic() > deadline:
            self._end()
            raise RankError(f"the ranks did not finish within {self.timeout:g} s; every rank was ended",
                            hint="a rank waiting in a collective that another rank never reaches hangs like this",
                            pids=self.pids)

    def close(self, abort: bool = False) -> None:
        if abort:
            self._end()
            return
        for inbox in self._inboxes:
            try:
                inbox.put(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + GRACE
        for process in self._processes:
            process.join(max(deadline - time.monotonic(), 0.0))
        self._end()

    def _end(self) -> None:
        """Terminate, then kill, every rank still running, and reap them all."""
        for process in self._processes:
            if process.is_alive():
                process.terminate()
        for process in self._processes:
            process.join(GRACE)
            if process.is_alive():
                process.kill()
                process.join()
        if not self._closed:
            self._closed = True
            for q in (*self._inboxes, self._outbox):
                q.cancel_join_thread()
                q.close()
            # Let go of them now: their semaphores are released when the queues are collected,
            # and an error's traceback keeps this object alive until exit, where the resource
            # tracker then warns of "leaked semaphore objects" under the error.
            self._inboxes, self._outbox = [], None


class LaunchedRanks(Ranks):
    """torchrun's ranks: this process is one of them; results are gathered to every rank."""

    def __init__(self, backend: str, timeout: float) -> None:
        import torch.distributed as dist

        self.world = int(os.environ["WORLD_SIZE"])
        self.rank = int(os.environ["RANK"])
        _set_cuda_device(backend)
        if not dist.is_initialized():
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
        self._dist = dist

    def agree(self, value: Any) -> Any:
        box = [value]
        self._dist.broadcast_object_list(box, src=0)
        return box[0]

    def run(self, job: Job) -> list[Any]:
        try:
            mine = job(self.rank, self.world)
        except Exception as err:  # torchrun ends the other ranks when this one exits 2
            message, hint = describe_error(err, self.rank)
            raise RankError(message, rank=self.rank, hint=hint) from None
        gathered: list[Any] = [None] * self.world
        self._dist.all_gather_object(gathered, mine)
        return gathered

    def close(self, abort: bool = False) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()


def _rank_context(mp: Any) -> Any:
    """Where the platform has it, a forkserver with torch imported once: each rank is forked
    from it instead of importing torch itself (`compare --ddp 2` on examples/distributed's MLP:
    6.8 s of CPU and 6.4 s of wall time against spawn's 8.2 s and 7.4 s, medians of 3 on 2 cores;
    a second group in the same process imports nothing). Elsewhere (Windows), spawn."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch.distributed", __name__])  # (used when the server starts)
    return context


def serve(rank: int, world: int, port: int, backend: str, timeout: float, inbox: Any, outbox: Any,
          environ: dict[str, str]) -> None:
    """A spawned rank: join the group, then run each job from `inbox` until None arrives."""
    import torch.distributed as dist

    os.dup2(2, 1)  # a rank never writes on stdout: it is the parent's (one JSON document)
    # A forked rank holds the environment its server started with: the parent's, as of now
    os.environ.clear()
    os.environ.update(environ)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    try:
        _set_cuda_device(backend)
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout))
    except Exception as err:
        outbox.put((rank, False, (f"rank {rank} could not join the process group: {err}", None)))
        outbox.close()
        outbox.join_thread()
        return
    try:
        while (job := inbox.get()) is not None:
            try:
                outbox.put((rank, True, job(rank, world)))
            except Exception as err:
                outbox.put((rank, False, describe_error(err, rank)))
                break
    finally:
        outbox.close()
        outbox.join_thread()  # every report is written before the rank leaves
        if dist.is_initialized():
            dist.destroy_process_group()
        # As gradcli's main does: tearing torch down costs a second or more per rank, and the
        # rank's work is delivered; leave at once.
        sys.stderr.flush()
        os._exit(0)


def describe_error(err: BaseException, rank: int) -> tuple[str, str | None]:
    """A rank's error as the parent reports it: gradcli's refusal as it is, anything else as
    the user's traceback (their frames only, as `grads` shows a forward's error)."""
    from ..targets.load import user_error

    if isinstance(err, GradcliError):
        return f"rank {rank}: {err.message}", err.hint
    return user_error(f"rank {rank} raised", err).message, None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the rendezvous of spawned ranks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _set_cuda_device(backend: str) -> None:
    if backend == "nccl":
        import torch

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
