"""The labels party's Dask cluster, as releases use it: which releases run there, one connection
shared by the process (a cluster that does not answer is refused with 503 before any charge), and the
staging of a release's partitions and sorted keys for the partitioned charge (nothing drawn)."""

from __future__ import annotations

import logging
import threading

from labeldp.common.errors import DomainError
from labeldp.scale import DaskEngine, Engine
from labels_party.budget.partitioned import StagedKeys, stage_keys
from labels_party.releases.partitions import write_input_partitions
from labels_party.releases.plan import Plan
from labels_party.storage.data_dir import DataDir

log = logging.getLogger("labeldp.labels.releases")


class ReleaseCluster:
    def __init__(self, data_dir: DataDir, scheduler: str | None) -> None:
        self.data_dir, self.scheduler = data_dir, scheduler
        self._engine: Engine | None = None
        self._engine_lock = threading.Lock()

    def runs(self, plan: Plan) -> bool:
        """Example-level RR-on-Bins releases run on the configured cluster; the others (classes,
        user-level, the unbiased randomizer) here."""
        return (
            self.scheduler is not None
            and plan.user is None
            and plan.loss != "zero_one"
            and plan.mechanism == "rr_on_bins"
        )

    def ready(self, plan: Plan) -> None:
        """Connect to the cluster now if the plan needs it (503 ``cluster-unavailable``, before any
        charge, when it does not answer)."""
        if self.runs(plan):
            self.engine()

    def engine(self) -> Engine:
        with self._engine_lock:
            if self._engine is None:
                assert self.scheduler is not None
                try:
                    self._engine = DaskEngine(self.scheduler)
                except (OSError, TimeoutError) as exc:
                    log.warning("the Dask cluster did not answer", extra={"path": self.scheduler})
                    raise DomainError(
                        "cluster-unavailable",
                        "the Dask cluster configured for releases did not answer; nothing was charged",
                        status=503,
                    ) from exc
            return self._engine

    def close(self) -> None:
        with self._engine_lock:
            if self._engine is not None:
                self._engine.close()
                self._engine = None

    def stage(self, release_id: str, plan: Plan) -> StagedKeys:
        """Before a cluster release's charge: write its examples as partitions (IDs, labels, ledger keys,
        user keys) and have the workers sort the keys for the partitioned charge. Draws nothing."""
        folder = self.data_dir.partitions(release_id)
        parts = write_input_partitions(self.engine(), plan, folder / "in")
        return stage_keys(self.engine(), parts, folder / "keys")
