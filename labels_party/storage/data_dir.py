"""Every path the labels party keeps under its data directory, in one place.

No other module joins paths under the data directory, and no value from a request or a message ever
becomes a path: every name below is built from an id this service issued (a UUID, checked before any
lookup — ``labeldp.common.db.owned``) or from a version number it counts, and fixed words.

    datasets/{dataset}/labels-v{n}.parquet       a dataset's label versions (and the uploads' staging)
    datasets/{dataset}/universe-v{n}.parquet     its universe versions
    datasets/{dataset}/non-sensitive-v{n}.parquet   the publisher's non-sensitive rows
    releases/{release}.parquet                   a release's output (example_id, bin)
    releases/{release}.record.parquet            what it froze: ledger key, user key, label per row
    messages/{release}.frames                    its signed message, as delivered
    partitions/{release}/                        a cluster release's partitions while it runs
    models/{model}.json                          a semi-sensitive model's signed message
    priors/{priors}.parquet                      stored priors: example_id, example_key, group (request order)
    priors/{priors}.npy                          their G × k group priors (rows sum to 1)
    priors/{priors}.frames                       the features party's signed answer, as received
    ledger/                                      spend segment files (``budget/segments.py``)
    tmp/{process}/                               spooled uploads of one process
    identity.pem                                 the signing key (unless configured elsewhere)
    labels.db                                    the SQLite database (unless PostgreSQL)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labeldp.common.instance import temporary_name


@dataclass(frozen=True)
class DataDir:
    root: Path

    # -- datasets -----------------------------------------------------------------------------------
    def dataset(self, dataset_id: str) -> Path:
        return self.root / "datasets" / dataset_id

    def labels(self, dataset_id: str, version: int) -> Path:
        return self.dataset(dataset_id) / f"labels-v{version}.parquet"

    def universe(self, dataset_id: str, version: int) -> Path:
        return self.dataset(dataset_id) / f"universe-v{version}.parquet"

    def non_sensitive(self, dataset_id: str, version: int) -> Path:
        return self.dataset(dataset_id) / f"non-sensitive-v{version}.parquet"

    def staging(self, dataset_id: str) -> Path:
        """A fresh temporary file beside the dataset's versions (same file system: the final rename is
        atomic), named for this process so that recovery can remove it if the process dies; the folder
        is created."""
        folder = self.dataset(dataset_id)
        folder.mkdir(parents=True, exist_ok=True)
        return folder / temporary_name("staging")

    # -- releases, messages, models ------------------------------------------------------------------
    def release(self, release_id: str) -> Path:
        return self.root / "releases" / f"{release_id}.parquet"

    def release_record(self, release_id: str) -> Path:
        """What a release froze (``labels_party/releases/record.py``), row for row with its output."""
        return self.root / "releases" / f"{release_id}.record.parquet"

    def release_groups(self, release_id: str) -> Path:
        """A feature-aware release's group mechanisms (JSON), beside its output."""
        return self.root / "releases" / f"{release_id}.groups.json"

    def message(self, release_id: str) -> Path:
        return self.root / "messages" / f"{release_id}.frames"

    def partitions(self, release_id: str) -> Path:
        """Where a cluster release keeps its input and output partitions while it runs."""
        return self.root / "partitions" / release_id

    def model_message(self, model_id: str) -> Path:
        return self.root / "models" / f"{model_id}.json"

    # -- priors (feature-aware releases) ------------------------------------------------------------
    def priors_groups(self, priors_id: str) -> Path:
        """Each requested example's group, in request order (``labels_party/priors/store.py``)."""
        return self.root / "priors" / f"{priors_id}.parquet"

    def priors_matrix(self, priors_id: str) -> Path:
        return self.root / "priors" / f"{priors_id}.npy"

    def priors_message(self, priors_id: str) -> Path:
        """The signed answer's frames exactly as received (its signature can be checked again)."""
        return self.root / "priors" / f"{priors_id}.frames"

    def priors_files(self, priors_id: str) -> tuple[Path, ...]:
        """Every file of stored priors (what deleting them removes)."""
        return self.priors_groups(priors_id), self.priors_matrix(priors_id), self.priors_message(priors_id)

    # -- the process's own files ---------------------------------------------------------------------
    @property
    def ledger(self) -> Path:
        return self.root / "ledger"

    @property
    def spools(self) -> Path:
        """Spooled uploads, a folder per process (``labeldp.common.instance.clean_spools``)."""
        return self.root / "tmp"

    def spool(self, owner: str) -> Path:
        return self.spools / owner

    @property
    def identity(self) -> Path:
        return self.root / "identity.pem"
