"""CPU-heavy file work in child processes, so that a server's reads never queue behind it for the GIL.

A server answers requests on threads that share one interpreter lock. Validating a million-row label
upload hashes every example ID in Python (two BLAKE2b digests an ID, about 1.7 s holding the lock), and
every read beside it waits for the lock each time it needs it, up to Python's switch interval (5 ms) a
time, a dozen times a request: a read's p95 went from 38 to 290 ms beside 1M-row uploads (BENCHMARKS.md,
"Reads under load"). In a child process the same work costs the server's threads only the wait for its
answer.

The children are started by a fork server — never forked from the threaded server itself, since a fork
copies locks that other threads hold — ahead of use (``warm``) or on first use, and live as long as the
pool. Work is a module-level function of picklable arguments that returns a small picklable result: paths
go in, counts come out, the files are the interface; a ``DomainError`` it raises reaches the caller
intact. A child that dies (killed, out of memory) fails the work it was running with ``OffloadError`` (an
internal error: the caller's own clean-up removes what the work had staged) and the pool is replaced for
the next call; a server that dies takes its children with it (``bound_to``). ``processes=0`` runs the
work in the caller's thread.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import select
import signal
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
log = logging.getLogger("labeldp.offload")


def bound_to(server: int) -> None:
    """A child's initializer: it stops when the server process that started it says so, or exits as
    soon as that process does — never on its own. A Ctrl-C reaches the whole process group: the server
    then finishes the work in flight and stops its children (``shutdown``), so the children ignore it
    (it would kill the work mid-file, with a traceback each). A server that is killed cannot stop its
    pool, and a pool's child otherwise waits on its queue for ever (it holds both ends) and keeps the
    fork server alive with it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        try:
            ended = os.pidfd_open(server)  # readable once the process has exited (Linux ≥ 5.3)
        except ProcessLookupError:
            os._exit(1)
        except (AttributeError, OSError):  # no pidfd here: ask once a second
            while _alive(server):
                threading.Event().wait(1.0)
            os._exit(1)
        select.select([ended], [], [])
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-server", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class OffloadError(RuntimeError):
    """The child process running a piece of work died before answering."""


class Offload:
    """A lazily started pool of ``processes`` children for CPU-heavy work (module docstring)."""

    def __init__(self, processes: int, preload: Sequence[str] = ()) -> None:
        self.processes = processes
        self._preload = list(preload)  # modules the fork server imports once, so children start warm
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                context = multiprocessing.get_context("forkserver")
                context.set_forkserver_preload(self._preload)  # ignored once the fork server runs
                self._pool = ProcessPoolExecutor(
                    self.processes, mp_context=context, initializer=bound_to, initargs=(os.getpid(),)
                )
            return self._pool

    def warm(self) -> None:
        """Start the fork server and a first child in the background (its imports take 1-2 s), so that
        the first upload does not wait for them."""
        if self.processes:
            threading.Thread(target=self._ready, name="offload-warm", daemon=True).start()

    def _ready(self) -> None:
        try:
            self._executor().submit(os.getpid).result()
        except Exception:  # a pool that cannot start fails the first work instead, with its error
            log.warning("file-work processes did not start ahead of use", exc_info=True)

    def run(self, work: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``work(*args, **kwargs)`` in a child process; its result, or the exception it raised."""
        if self.processes == 0:
            return work(*args, **kwargs)
        pool = self._executor()
        try:
            return pool.submit(work, *args, **kwargs).result()
        except BrokenProcessPool as exc:
            self._replace(pool)
            log.error("the process running %s died; that work failed", work.__name__)
            raise OffloadError(f"the process running {work.__name__} died before answering") from exc

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken:
                self._pool = None
        broken.shutdown(wait=False, cancel_futures=True)

    def shutdown(self) -> None:
        """Let running work finish, drop queued work, stop the children."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
