"""A throwaway PostgreSQL cluster for the test run: initdb in a temporary directory, a loopback port,
removed at the end. Runs the server as the ``postgres`` user when the tests run as root."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary(name: str) -> str | None:
    """On PATH, or where Debian's postgresql packages put it (newest version first)."""
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    return None


def available() -> bool:
    return _binary("initdb") is not None and _binary("pg_ctl") is not None


def _as_server_user(cmd: list[str]) -> list[str]:
    cmd = [_binary(cmd[0]) or cmd[0], *cmd[1:]]
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextmanager
def cluster() -> Iterator[str]:
    """Yield a libpq URL (``postgresql://postgres@127.0.0.1:PORT/postgres``) to a fresh cluster."""
    root = Path(tempfile.mkdtemp(prefix="labeldp-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    port = _free_port()
    log = root / "server.log"
    try:
        subprocess.run(
            _as_server_user(
                ["initdb", "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"]
            ),
            check=True,
            capture_output=True,
        )
        options = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        subprocess.run(
            _as_server_user(
                ["pg_ctl", "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start"]
            ),
            check=True,
            capture_output=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            _as_server_user(["pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"]),
            check=False,
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


def create_database(server_url: str, prefix: str = "t", template: str | None = None) -> str:
    """A new database in the cluster, empty or a copy of the database named ``template``; returns its
    URL."""
    from sqlalchemy import create_engine, text

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(
        server_url.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else "")))
    admin.dispose()
    return server_url.rsplit("/", 1)[0] + "/" + name


def drop_database(server_url: str, database_url: str) -> None:
    from sqlalchemy import create_engine, text

    name = database_url.rsplit("/", 1)[1]
    admin = create_engine(
        server_url.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()
