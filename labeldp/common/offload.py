"""CPU-heavy file work in child processes, so that a server's reads never queue behind it for the GIL.

A server answers requests on threads that share one interpreter lock. Validating a million-row label
upload hashes every example ID in Python (two BLAKE2b digests an ID, about 1.7 s holding the lock), and
every read beside it waits for the lock each time it needs it, up to Python's switch interval (5 ms) a
time, a dozen times a request: a read's p95 went from 38 to 290 ms beside 1M-row uploads (BENCHMARKS.md,
"Reads under load"). In a child process the same work costs the server's threads only the wait for its
answer.

Each piece of work runs in a process of its own, and at most ``processes`` run at once (more wait for a
turn). The processes are forked by a fork server — never by the threaded server itself, since a fork
copies locks that other threads hold — which imports what the work needs once (``preload``, started
ahead of use by ``warm``), so a child starts in milliseconds. One process a piece of work is what keeps
two uploads apart: a child that dies (killed, out of memory) fails only the work it was running, with
``OffloadError`` (an internal error: the caller's own clean-up removes what the work had staged), and
whatever memory a piece of work took — an upload that decodes to a lot before it is refused — goes
back to the system when its process exits. (A shared pool's children share its fate: killing one
broke the pool and failed every upload in flight, whoever's.) Work is a module-level function of
picklable arguments that returns a small picklable result: paths go in, counts come out, the files
are the interface; a ``DomainError`` it raises reaches the caller intact. A server that dies takes its
children with it (``exit_with``). ``processes=0`` runs the work in the caller's thread.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from typing import Any, ParamSpec, TypeVar, cast

from labeldp.common.lifelines import exit_with

P = ParamSpec("P")
R = TypeVar("R")
log = logging.getLogger("labeldp.offload")


def bound_to(server: int) -> None:
    """A child's start: it exits as soon as the server process that started it does, never on its own.
    A Ctrl-C reaches the whole process group: the server then finishes the work in flight and stops,
    so the children ignore it (it would kill the work mid-file, with a traceback each). A server that
    is killed cannot stop its children, and one left behind would finish work nobody waits for."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with(server, lambda: os._exit(1))


def _child(
    answer: Connection, server: int, work: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
) -> None:
    bound_to(server)
    try:
        outcome: tuple[bool, Any] = (True, work(*args, **kwargs))
    except BaseException as exc:  # the caller re-raises it
        outcome = (False, exc)
    try:
        answer.send(outcome)
    except Exception as exc:  # an exception (or a result) that does not pickle: say what it was
        answer.send((False, RuntimeError(f"{work.__name__} answered what cannot be sent back: {exc!r}")))
    finally:
        answer.close()


class OffloadError(RuntimeError):
    """The child process running a piece of work died before answering."""


class Offload:
    """Runs work in child processes, one each, ``processes`` at a time (module docstring)."""

    def __init__(self, processes: int, preload: Sequence[str] = ()) -> None:
        self.processes = processes
        self._preload = list(preload)  # modules the fork server imports once, so children start warm
        self._turns = threading.BoundedSemaphore(max(processes, 1))
        self._context: ForkServerContext | None = None
        self._lock = threading.Lock()
        self._running: set[BaseProcess] = set()
        self._closed = False

    def _fork_server(self) -> ForkServerContext:
        with self._lock:
            if self._context is None:
                context = multiprocessing.get_context("forkserver")
                context.set_forkserver_preload(self._preload)  # ignored once the fork server runs
                self._context = context
            return self._context

    def warm(self) -> None:
        """Start the fork server (its imports take 1-2 s) and a first child in the background, so that
        the first upload does not wait for them."""
        if self.processes:
            threading.Thread(target=self._ready, name="offload-warm", daemon=True).start()

    def _ready(self) -> None:
        try:
            self.run(os.getpid)
        except Exception:  # a fork server that cannot start fails the first work instead, with its error
            log.warning("file-work processes did not start ahead of use", exc_info=True)

    def run(self, work: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``work(*args, **kwargs)`` in a child process of its own; its result, or the exception it
        raised (``OffloadError`` if the process died first)."""
        if self.processes == 0:
            return work(*args, **kwargs)
        context = self._fork_server()
        with self._turns:
            if self._closed:
                raise OffloadError("the server is stopping")
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(
                target=_child,
                args=(writer, os.getpid(), work, args, kwargs),
                name=f"file-work:{work.__name__}",
            )
            try:
                process.start()
                with self._lock:
                    self._running.add(process)
                writer.close()
                ok, value = self._answer(reader, process, work.__name__)
            finally:
                writer.close()
                reader.close()
                with self._lock:
                    self._running.discard(process)
                if process.pid is not None:
                    process.join()
        if not ok:
            raise value
        return cast(R, value)

    @staticmethod
    def _answer(reader: Connection, process: BaseProcess, name: str) -> tuple[bool, Any]:
        wait([reader, process.sentinel])
        try:
            if reader.poll():
                answer: tuple[bool, Any] = reader.recv()
                return answer
        except (EOFError, OSError):
            pass
        process.join()
        log.error("the process running %s died (exit code %s); that work failed", name, process.exitcode)
        raise OffloadError(f"the process running {name} died before answering")

    def shutdown(self) -> None:
        """Let running work finish; work that has not started yet is refused."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        for process in running:
            process.join()
