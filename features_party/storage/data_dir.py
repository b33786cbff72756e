"""Every path the features party keeps under its data directory, in one place.

No other module joins paths under the data directory, and no value from a request or a message ever
becomes a path: received releases and models get names this party draws itself (random hex), feature
tables and trained models are named by ids it issued (UUIDs), and the rest are fixed words.

    releases/{random}.parquet                    a received release (example_id, bin)
    models-received/{random}.json                a received semi-sensitive model's signed message
    feature-tables/{table}/v{n}.parquet          a feature table's versions
    models/{job}/                                a trained model (model.skops, meta.json)
    tmp/{process}/                               spooled uploads and received chunks of one process
    identity.pem                                 the signing key (unless configured elsewhere)
    features.db                                  the SQLite database (unless PostgreSQL)
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path

_VERSION = re.compile(r"^v([0-9]{1,9})\.parquet$")


@dataclass(frozen=True)
class DataDir:
    root: Path

    def new_release(self) -> Path:
        """Where a newly received release is stored: a name this party chooses, never one from the wire."""
        return self.root / "releases" / f"{uuid.uuid4().hex}.parquet"

    def new_received_model(self) -> Path:
        return self.root / "models-received" / f"{uuid.uuid4().hex}.json"

    def table(self, table_id: str, version: int) -> Path:
        return self.root / "feature-tables" / table_id / f"v{version}.parquet"

    @property
    def tables(self) -> Path:
        """One folder per feature table (named by its id), holding its versions."""
        return self.root / "feature-tables"

    def table_versions(self, folder: Path) -> dict[int, Path]:
        """The versions stored in a table's folder (temporary files of a write in progress aside)."""
        found = {}
        for path in folder.iterdir():
            match = _VERSION.fullmatch(path.name)
            if match:
                found[int(match.group(1))] = path
        return found

    def model(self, job_id: str) -> Path:
        """A trained model's folder (the job's id is the model's)."""
        return self.root / "models" / job_id

    @property
    def spools(self) -> Path:
        return self.root / "tmp"

    def spool(self, owner: str) -> Path:
        return self.spools / owner

    @property
    def identity(self) -> Path:
        return self.root / "identity.pem"
