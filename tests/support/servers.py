"""Real servers on loopback for service tests: uvicorn in a thread, or a killable subprocess."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from features_party import tenants as features_tenants
from features_party.api.app import create_app as create_features_app
from features_party.config import FeaturesSettings
from features_party.storage import db as features_db
from labeldp import processes
from labeldp.processes import wait_healthy
from labels_party.api.app import create_app
from labels_party.budget.epsilon import to_micro_floor
from labels_party.config import LabelsSettings
from labels_party.storage.db import make_engine, migrate, session_factory
from labels_party.tenants import create_tenant


def tenant_key(
    database_url: str, name: str, budget: str = "1", per_user: str | None = None
) -> tuple[str, str]:
    """Create a tenant directly in the database (what `labeldp labels tenant create` does);
    returns (tenant id, bearer key)."""
    engine = make_engine(database_url)
    try:
        migrate(engine)
        with session_factory(engine).begin() as s:
            user_budget = None if per_user is None else to_micro_floor(per_user)
            new = create_tenant(s, name, to_micro_floor(budget), user_budget)
    finally:
        engine.dispose()
    return new.tenant_id, new.api_key


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """An ASGI app served by uvicorn over real HTTP on loopback, in a thread of this process.

    The listening socket is bound here, before the app starts: the features party's lifespan opens its
    gRPC port (port 0 in tests) first, and could otherwise be given the very port picked for HTTP."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base)
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def descendants(pid: int) -> set[int]:
    """Every process a process started, and theirs (the fork server and file-work processes of a
    server included), from ``/proc``."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:  # the task ended meanwhile
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


def labels_server_thread(settings: LabelsSettings) -> AbstractContextManager[str]:
    return serve_in_thread(create_app(settings))


class LabelsProcess(processes.LabelsProcess):
    """``labeldp labels serve`` on a data directory and database."""

    def __init__(
        self,
        data_dir: Path,
        database_url: str,
        log_path: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            {
                "LABELDP_DATA_DIR": str(data_dir),
                "LABELDP_DATABASE_URL": database_url,
                "LABELDP_LOG_LEVEL": "info" if log_path else "warning",
                **(env or {}),
            },
            log_path,
        )


def features_server_thread(settings: FeaturesSettings) -> AbstractContextManager[str]:
    """The features-party app (REST and its gRPC receiver)."""
    return serve_in_thread(create_features_app(settings))


def features_tenant_key(settings: FeaturesSettings, name: str) -> str:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = features_db.make_engine(settings.resolved_database_url())
    try:
        features_db.migrate(engine)
        with features_db.session_factory(engine).begin() as s:
            return features_tenants.create_tenant(s, name).api_key
    finally:
        engine.dispose()
