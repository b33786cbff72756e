"""Who owns a piece of unfinished work, and whether that owner is gone.

Several processes may share one database (and a data directory). Work a process starts — a release
being privatized, a spooled upload — carries the process's ``Instance`` token. Another process may
only clean up after it once the owner is known to be gone: on the same host, its pid no longer runs the
same process (the start time in /proc tells a reused pid apart, the boot id a reboot); on another
host, its lease (a heartbeat timestamp) has expired.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _boot_id() -> str:
    try:
        return _BOOT_ID.read_text().strip().replace("-", "")[:12]
    except OSError:
        return "noboot"


def _start_ticks(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), or None when it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return "unknown"
        return "unknown"
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, counting after the command name


def _clean(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)[:60] or "host"


@dataclass(frozen=True)
class Instance:
    host: str
    boot: str
    pid: int
    started: str
    nonce: str

    @classmethod
    def current(cls, host: str | None = None) -> Instance:
        pid = os.getpid()
        return cls(
            _clean(host or socket.gethostname()),
            _boot_id(),
            pid,
            _start_ticks(pid) or "0",
            secrets.token_hex(4),
        )

    @property
    def token(self) -> str:
        """A filename-safe identity: ``host.boot.pid.started.nonce``."""
        return f"{self.host}.{self.boot}.{self.pid}.{self.started}.{self.nonce}"

    def owner_is_gone(self, token: str | None) -> bool:
        """True only when the owner is certainly not running: a process of this host and boot whose pid
        is gone or now runs another process. Owners on other hosts are judged by their lease instead."""
        if not token:
            return False
        parts = token.split(".")
        if len(parts) != 5:
            return False
        host, boot, pid, started, _ = parts
        if host != self.host:
            return False
        if boot != self.boot:
            return True  # the host rebooted since
        if not pid.isdigit():
            return False
        now = _start_ticks(int(pid))
        return now is None or now not in ("unknown", started)


def this_process() -> Instance:
    """This process's ``Instance`` under its own host name (recomputed after a fork: a forked child is
    another owner). Names the temporary files a process writes, so that the next process can tell a
    dead writer's leftovers from a live writer's work in progress."""
    return _instance_of(os.getpid())


@functools.lru_cache(maxsize=1)
def _instance_of(pid: int) -> Instance:
    return Instance.current()


def temporary_name(final: str) -> str:
    """A hidden temporary name beside ``final``, carrying this process's token (``~`` never occurs in
    one): ``.{final}~{token}~{random}.tmp``."""
    return f".{final}~{this_process().token}~{secrets.token_hex(8)}.tmp"


def writer_of(temporary: str) -> str | None:
    """The token a ``temporary_name`` carries (None for other names)."""
    parts = temporary.split("~")
    return parts[1] if len(parts) == 3 and parts[2].endswith(".tmp") else None


def clean_spools(root: Path, me: Instance, stale_after_s: float = 24 * 3600) -> int:
    """Remove the spool folders (``root/<token>/``) of owners that are gone, and anything else under
    ``root`` untouched for ``stale_after_s``; returns how many entries were removed."""
    if not root.is_dir():
        return 0
    removed = 0
    now = time.time()
    for entry in root.iterdir():
        if entry.name == me.token:
            continue
        try:
            stale = now - entry.stat().st_mtime > stale_after_s
        except OSError:
            continue
        if me.owner_is_gone(entry.name) or stale:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed += 1
    return removed


def clean_atomic_leftovers(root: Path, me: Instance | None = None, older_than_s: float = 3600) -> int:
    """Remove the temporary files (``.*.tmp``) that a crash left behind an atomic write or a staged
    upload: at once when their writer is certainly gone (``me`` judges: same host, process no longer
    running), else once older than ``older_than_s`` (a live writer's file is never that old, and a
    writer on another host is judged by age alone)."""
    if not root.is_dir():
        return 0
    removed = 0
    now = time.time()
    for path in root.rglob(".*.tmp"):
        writer = writer_of(path.name)
        try:
            gone = me is not None and writer is not None and me.owner_is_gone(writer)
            if gone or now - path.stat().st_mtime > older_than_s:
                path.unlink(missing_ok=True)
                removed += 1
        except OSError:
            continue
    return removed
