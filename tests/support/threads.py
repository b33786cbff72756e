"""Threads made hostile on purpose, for code that runs on several at once."""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


def _on_collect(phase: str, info: dict[str, int]) -> None:
    """Python code run inside every garbage collection, as hypothesis's and Dask's callbacks are."""
    time.perf_counter()


@contextmanager
def under_gc_callback() -> Iterator[None]:
    """A Python callback on every garbage collection and threads switched every 10 µs: where CPython
    before 3.11.8 fails an ``ast`` parse on one thread while another runs (gh-106905: "AST constructor
    recursion depth mismatch"; numpy parses .npy headers so)."""
    interval = sys.getswitchinterval()
    gc.callbacks.append(_on_collect)
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        gc.callbacks.remove(_on_collect)
