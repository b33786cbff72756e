"""``labeldp <party> serve`` as a child process on loopback: what the demo and the tests start.

Children run in their own session, so a Ctrl-C in the terminal reaches only the parent, which then
stops them in order (SIGTERM, then SIGKILL after a grace period) instead of racing them to exit.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether a service could listen on ``127.0.0.1:port`` now. With ``SO_REUSEADDR``, as the
    services bind: a port whose last connection is still in TIME_WAIT (a demo that just ran) is free
    to them, and a port another process listens on is not."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wait_healthy(base_url: str, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Poll ``/healthz``; give up early if the process has already exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the service at {base_url} exited with code {proc.returncode}")
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{base_url} did not become healthy within {timeout:g} s")


class ServiceProcess:
    """One party's ``serve`` command with its environment, a port (a free one unless given) and an
    optional log file."""

    party = "labels"

    def __init__(self, env: dict[str, str], log_path: Path | None = None, port: int | None = None) -> None:
        self.port = port or free_port()
        self.log_path = log_path
        self.env = {**os.environ, **env}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def command(self) -> list[str]:
        return [sys.executable, "-m", "labeldp.cli", self.party, "serve", "--port", str(self.port)]

    def start(self, timeout: float = 60.0) -> None:
        cmd = self.command()
        quiet = subprocess.DEVNULL
        if self.log_path is None:
            self.proc = subprocess.Popen(
                cmd, env=self.env, stdout=quiet, stderr=quiet, start_new_session=True
            )
        else:
            with self.log_path.open("ab") as log:  # the child keeps its own descriptor
                self.proc = subprocess.Popen(
                    cmd, env=self.env, stdout=log, stderr=log, start_new_session=True
                )
        try:
            wait_healthy(self.base_url, timeout, self.proc)
        except BaseException:
            self.stop()
            raise

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
            self.proc = None

    def stop(self, grace: float = 30.0) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.kill()
            self.proc = None


class LabelsProcess(ServiceProcess):
    """``labeldp labels serve`` (configured by ``LABELDP_*``)."""


class FeaturesProcess(ServiceProcess):
    """``labeldp features serve``: REST and the gRPC receiver in one process (``LABELDP_FEATURES_*``)."""

    party = "features"
