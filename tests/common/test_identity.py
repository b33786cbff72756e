"""A party's signing key, created on first start: processes that start together (``serve --workers N``)
must all sign with the one key on disk, or releases signed by all but one would not verify against the
key the party publishes."""

from __future__ import annotations

import multiprocessing as mp
import stat
from pathlib import Path

from labeldp.common.identity import Identity


def _create(path: str, ready: mp.synchronize.Barrier, out: mp.Queue[str]) -> None:
    ready.wait()
    out.put(Identity.load_or_create(Path(path)).key_id)


def test_processes_creating_the_key_together_all_hold_the_one_on_disk(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    n = 8
    for trial in range(3):
        path = tmp_path / f"trial{trial}" / "identity.pem"
        ready, out = ctx.Barrier(n), ctx.Queue()
        procs = [ctx.Process(target=_create, args=(str(path), ready, out)) for _ in range(n)]
        for p in procs:
            p.start()
        ids = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        on_disk = Identity.load_or_create(path).key_id
        assert ids == [on_disk] * n
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert [p.name for p in path.parent.iterdir()] == ["identity.pem"]  # no temporary left
