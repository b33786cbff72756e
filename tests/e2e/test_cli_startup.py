"""The CLI starts without the heavy libraries: ``labeldp --version``, every ``--help`` and the import
of the command tree load neither the parties, nor the mechanism library (numpy, scipy), nor pyarrow,
torch, SQLAlchemy, FastAPI or httpx — each command imports what it needs when it runs. A statement
about what is imported, not a timing (timings belong in benchmarks)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = (
    "scipy",
    "numpy",
    "pyarrow",
    "torch",
    "sqlalchemy",
    "fastapi",
    "httpx",
    "labels_party",
    "features_party",
    "labeldp.mechanisms",
)


def imported_by(*args: str) -> set[str]:
    """Every module ``python -X importtime ARGS`` imports (its report on stderr)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }


@pytest.mark.parametrize(
    "args",
    [
        ("-c", "import labeldp.cli.main"),
        ("-m", "labeldp.cli", "--version"),
        ("-m", "labeldp.cli", "labels", "datasets", "list", "--help"),
    ],
    ids=["import", "version", "help"],
)
def test_the_cli_starts_without_heavy_imports(args: tuple[str, ...]) -> None:
    modules = imported_by(*args)
    assert "labeldp.cli.labels" in modules and "labeldp.cli.admin" in modules  # the whole tree was read
    heavy = sorted(m for m in modules if any(m == h or m.startswith(f"{h}.") for h in HEAVY))
    assert not heavy, f"imported at start-up: {heavy[:20]}"
