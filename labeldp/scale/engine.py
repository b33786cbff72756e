"""Where partition work runs: in this process, or on a Dask cluster (``LABELDP_DASK_SCHEDULER``).

``Engine.map(fn, *iterables, **shared)`` returns ``[fn(*args, **shared) for args in zip(*iterables)]``
in order. The Dask engine submits the calls as *impure* tasks (never deduplicated or cached: every
call draws fresh randomness) and sends ``shared`` arguments to the workers once. Dask is an optional
extra (``pip install 'labeldp[scale]'``), imported only when a cluster is asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

LOCAL = "local"  # an in-process LocalCluster of worker processes
CONNECT_TIMEOUT_SECONDS = 10


class Engine(Protocol):
    def map(self, fn: Callable[..., Any], *iterables: list[Any], **shared: Any) -> list[Any]: ...

    def close(self) -> None: ...


class InProcess:
    """The single-process engine: the same tasks, one after another, here."""

    def map(self, fn: Callable[..., Any], *iterables: list[Any], **shared: Any) -> list[Any]:
        return [fn(*args, **shared) for args in zip(*iterables, strict=True)]

    def close(self) -> None:
        pass


class DaskEngine:
    """Tasks on a Dask cluster: ``scheduler`` is ``tcp://host:port`` or ``"local"`` (a LocalCluster of
    ``workers`` single-threaded processes, for one machine and for the tests)."""

    def __init__(self, scheduler: str, *, workers: int = 2) -> None:
        from distributed import Client, LocalCluster

        self._cluster = None
        if scheduler == LOCAL:
            self._cluster = LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
            )
            self.client = Client(self._cluster)
        else:
            self.client = Client(scheduler, timeout=CONNECT_TIMEOUT_SECONDS)

    def map(self, fn: Callable[..., Any], *iterables: list[Any], **shared: Any) -> list[Any]:
        # hash=False: a fresh key per call. With content-hashed keys a call can scatter a value under the
        # key an earlier call is still releasing, and the scheduler cancels the new tasks ("lost
        # dependencies"; about one call in 600 on a LocalCluster).
        scattered = {
            name: self.client.scatter(value, broadcast=True, hash=False) for name, value in shared.items()
        }
        futures = self.client.map(fn, *iterables, pure=False, **scattered)
        return list(self.client.gather(futures))

    def close(self) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()


def engine_for(scheduler: str | None, *, workers: int = 2) -> Engine:
    """``None`` or ``""``: this process; anything else: a Dask cluster."""
    return DaskEngine(scheduler, workers=workers) if scheduler else InProcess()
