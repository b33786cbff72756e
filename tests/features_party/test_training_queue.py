"""The training queue over real HTTP: a tenant may keep only so many jobs waiting (429 too-many-jobs
with Retry-After beyond, nothing stored), and the worker serves tenants in turn, so one tenant's
queue does not hold another's job behind all of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from features_party.config import FeaturesSettings
from labeldp.common.identity import Identity
from tests.support.features_party import census_release, deliver, pin_sender, put_table, wait
from tests.support.servers import features_server_thread, features_tenant_key


def tenant(base: str, settings: FeaturesSettings, name: str) -> tuple[httpx.Client, str]:
    """A tenant with its own pinned sender, a release from it and the census table."""
    c = httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {features_tenant_key(settings, name)}"}, timeout=60
    )
    sender = Identity.generate()
    rel, features = census_release("squared")
    pin_sender(c, sender)
    deliver(c, rel, sender)
    put_table(c, "census", features).raise_for_status()
    return c, rel.release_id


def test_a_full_queue_answers_429_and_tenants_are_served_in_turn(tmp_path: Path) -> None:
    settings = FeaturesSettings(
        data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True, max_queued_jobs_per_tenant=2
    )
    with features_server_thread(settings) as base:
        a, release_a = tenant(base, settings, "busy")
        b, release_b = tenant(base, settings, "patient")

        def start(c: httpx.Client, release: str, model: str) -> httpx.Response:
            return c.post(
                "/v1/models", json={"release_id": release, "feature_table": "census", "model": model}
            )

        first = start(a, release_a, "hgb")  # runs for seconds: the rest wait behind it
        waiting = [start(a, release_a, "linear") for _ in range(2)]
        assert [r.status_code for r in (first, *waiting)] == [202, 202, 202]
        full = start(a, release_a, "linear")
        assert full.status_code == 429, full.text
        assert full.headers["content-type"].startswith("application/problem+json")
        assert full.json()["type"] == "too-many-jobs" and int(full.headers["Retry-After"]) >= 1
        assert full.json()["retry_after"] == int(full.headers["Retry-After"])
        assert len(a.get("/v1/models").json()["items"]) == 3  # the refused job was never stored
        other = start(b, release_b, "linear")  # another tenant's quota is its own
        assert other.status_code == 202, other.text
        done: dict[str, Any] = {
            name: wait(c, r.json()["id"])
            for name, c, r in (
                ("a1", a, first),
                ("a2", a, waiting[0]),
                ("a3", a, waiting[1]),
                ("b1", b, other),
            )
        }
        assert all(d["status"] == "succeeded" for d in done.values()), done
        # one worker, so jobs finish in the order they start: B's job went right after the running one,
        # not after A's queue
        order = sorted(done, key=lambda name: done[name]["finished_at"])
        assert order == ["a1", "b1", "a2", "a3"], order
        assert start(a, release_a, "linear").status_code == 202  # a drained queue takes jobs again
