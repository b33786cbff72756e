"""Superseded dataset versions are deleted once nothing may still read them.

Every upload writes a new version of a dataset's labels, universe or non-sensitive rows; the older one
stays readable for a grace period after it was superseded (``LABELDP_SUPERSEDED_GRACE_SECONDS``, one
hour by default), because work planned on it may still open it — a cluster release's workers read the
labels file its plan named. A dataset with a charged job still in progress keeps every version until
the job ends. The current version is never touched.
"""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from labels_party.storage.data_dir import DataDir
from labels_party.storage.orm import Dataset, Release, SemiSensitiveModel


def collect_superseded(sessions: sessionmaker[Session], data_dir: DataDir, grace_seconds: float) -> int:
    """Delete the versions superseded more than ``grace_seconds`` ago; returns how many files."""
    with sessions() as session:
        versions = (Dataset.labels_version, Dataset.universe_version, Dataset.non_sensitive_version)
        datasets = session.execute(select(Dataset.id, *versions)).all()
        busy = set(session.execute(select(Release.dataset_id).where(Release.status == "charged")).scalars())
        busy |= set(
            session.execute(
                select(SemiSensitiveModel.dataset_id).where(SemiSensitiveModel.status == "charged")
            ).scalars()
        )
    now = time.time()
    removed = 0
    for dataset_id, labels, universe, non_sensitive in datasets:
        if dataset_id in busy:
            continue
        for path_of, current in (
            (data_dir.labels, labels),
            (data_dir.universe, universe),
            (data_dir.non_sensitive, non_sensitive),
        ):
            for version in range(current - 1, 0, -1):
                old = path_of(dataset_id, version)
                if not old.exists():
                    break  # collected earlier, and so was everything before it
                try:
                    superseded_at = path_of(dataset_id, version + 1).stat().st_mtime
                except OSError:
                    continue
                if now - superseded_at > grace_seconds:
                    old.unlink(missing_ok=True)
                    removed += 1
    return removed
