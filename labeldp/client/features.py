"""The features party's client (the publisher): senders, received releases and models, feature
tables, joins, training, predictions."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from labeldp.client.errors import ApiError
from labeldp.client.transport import CHUNK, ApiClient
from labeldp.client.types import (
    FeaturesIdentity,
    FeatureTable,
    Job,
    Join,
    Model,
    Predictions,
    Pricing,
    PricingGrant,
    ReceivedModel,
    ReceivedRelease,
    Sender,
)


class _Blocks:
    """A read-only file over an iterator of byte blocks, for ``pyarrow.ipc.open_stream``."""

    closed = False

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self._blocks, self._buffer = blocks, b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            block = next(self._blocks, None)
            if block is None:
                break
            self._buffer += block
        if size < 0:
            out, self._buffer = self._buffer, b""
        else:
            out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


class FeaturesClient(ApiClient):
    """The features party (publisher): senders, feature tables, joins, training, predictions."""

    def identity(self) -> FeaturesIdentity:
        return self.call("GET", "/v1/identity")

    def senders(self) -> list[Sender]:
        return list(self.items("/v1/senders"))

    def pin_sender(self, sender_id: str, public_key_pem: str) -> Sender:
        return self.call("POST", "/v1/senders", json={"id": sender_id, "public_key_pem": public_key_pem})

    def grant_pricing(self, sender_id: str, model_id: str, max_groups: int | None = None) -> PricingGrant:
        """Let ``model_id`` price the pinned sender's examples (its priors requests); replaces a grant."""
        body: dict[str, object] = {"model_id": model_id}
        if max_groups is not None:
            body["max_groups"] = max_groups
        return self.call("PUT", f"/v1/senders/{sender_id}/pricing", json=body)

    def pricing_grant(self, sender_id: str) -> PricingGrant:
        return self.call("GET", f"/v1/senders/{sender_id}/pricing")

    def withdraw_pricing(self, sender_id: str) -> None:
        self.call("DELETE", f"/v1/senders/{sender_id}/pricing", raw=True)

    def pricings(self) -> list[Pricing]:
        """Every pricing request this tenant answered: what left this party."""
        return list(self.items("/v1/pricings"))

    def upload_table(
        self,
        name: str,
        file: Path,
        on_bytes: Callable[[int], None] | None = None,
        non_sensitive: list[str] | None = None,
    ) -> FeatureTable:
        """Upload a feature table; ``non_sensitive`` declares the columns that may be exported for
        training with semi-sensitive features."""
        query = f"?non_sensitive={','.join(non_sensitive)}" if non_sensitive else ""
        return self.upload(f"/v1/feature-tables/{name}{query}", file, on_bytes)

    def non_sensitive_rows(self, name: str, release_id: str) -> bytes:
        """The table's declared non-sensitive columns for a release's examples (Parquet)."""
        return bytes(
            self.call(
                "GET", f"/v1/feature-tables/{name}/non-sensitive-rows", params={"release_id": release_id}
            )
        )

    def join(self, release_id: str, feature_table: str) -> Join:
        return self.call("POST", "/v1/joins", json={"release_id": release_id, "feature_table": feature_table})

    def train(
        self,
        release_id: str,
        feature_table: str,
        model: str = "hgb",
        debias: str = "affine",
        validation_fraction: float = 0.2,
        *,
        also_release_ids: list[str] | None = None,
    ) -> Job:
        """Train on a received release (and ``also_release_ids``: more releases of the same labels'
        kind, each row debiased by its own mechanism — both stages of a feature-aware loop)."""
        body: dict[str, object] = {
            "release_id": release_id,
            "feature_table": feature_table,
            "model": model,
            "debias": debias,
            "validation_fraction": validation_fraction,
        }
        if also_release_ids:
            body["also_release_ids"] = also_release_ids
        return self.call("POST", "/v1/models", json=body)

    def job(self, job_id: str) -> Job:
        return self.call("GET", f"/v1/jobs/{job_id}")

    def wait_for_job(
        self,
        job_id: str,
        on_progress: Callable[[Job], None] | None = None,
        timeout: float = 3600.0,
        poll: float = 0.25,
    ) -> Job:
        """Poll until the job succeeds or fails (a failure raises ``ApiError`` with the job's error)."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if on_progress is not None:
                on_progress(job)
            if job["status"] == "succeeded":
                return job
            if job["status"] == "failed":
                raise ApiError(0, "training-failed", str(job["error"]), dict(job))
            if time.monotonic() > deadline:
                raise ApiError(
                    0, "timeout", f"job {job_id} still {job['status']} after {timeout:g} s", dict(job)
                )
            time.sleep(poll)

    def model(self, model_id: str) -> Model:
        return self.call("GET", f"/v1/models/{model_id}")

    def models(self) -> list[Model]:
        return list(self.items("/v1/models"))

    def received_releases(self) -> list[ReceivedRelease]:
        return list(self.items("/v1/releases"))

    def received_release(self, release_id: str) -> ReceivedRelease:
        return self.call("GET", f"/v1/releases/{release_id}")

    def tables(self) -> list[FeatureTable]:
        return list(self.items("/v1/feature-tables"))

    def table(self, name: str) -> FeatureTable:
        return self.call("GET", f"/v1/feature-tables/{name}")

    def download_model(self, model_id: str, destination: Path) -> int:
        """Stream the model's skops artifact to ``destination`` (written whole or not at all); bytes."""
        partial = destination.with_name(destination.name + ".partial")
        try:
            with self.http.stream("GET", f"/v1/models/{model_id}/artifact") as r:
                if r.status_code >= 400:
                    r.read()
                    raise ApiError.of(r)
                size = 0
                with partial.open("wb") as out:
                    for block in r.iter_bytes(CHUNK):
                        out.write(block)
                        size += len(block)
        except httpx.TransportError as exc:
            partial.unlink(missing_ok=True)
            raise ApiError(0, "unreachable", f"{self.http.base_url}: {exc}") from exc
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        partial.replace(destination)
        return size

    def download_training_set(
        self,
        release_id: str,
        destination: Path,
        feature_table: str | None = None,
        *,
        row_groups_per_request: int = 64,
        attempts: int = 5,
        on_row_groups: Callable[[int, int], None] | None = None,
    ) -> int:
        """A received release's training set joined to ``feature_table`` (or, without one, its released
        values alone) written to ``destination`` as one Parquet file, with its description beside it
        (``<destination>.labeldp.json``, what ``labeldp_model.Release.load`` reads). Fetched as Arrow
        IPC streams of ``row_groups_per_request`` row groups, each group written as it arrives: a cut
        connection resumes at the first group not yet written (``attempts`` tries in a row; a 429 is
        waited out with backoff). Written
        whole or not at all; returns the rows. ``on_row_groups(done, total)`` reports progress."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from labeldp_model.release import METADATA_KEY, SIBLING_SUFFIX

        route = "training-set" if feature_table is not None else "released-values"
        params: dict[str, Any] = {"format": "arrow", "row_groups": row_groups_per_request}
        if feature_table is not None:
            params["feature_table"] = feature_table
        partial = destination.with_name(destination.name + ".partial")
        writer: pq.ParquetWriter | None = None
        done, total, rows, failures = 0, None, 0, 0
        try:
            while total is None or done < total:
                try:
                    with self.http.stream(
                        "GET",
                        f"/v1/releases/{release_id}/{route}",
                        params={**params, "row_group_offset": done},
                    ) as r:
                        if (
                            r.status_code == 429 and failures + 1 < attempts
                        ):  # a cut stream's slot, not yet freed
                            failures += 1
                            time.sleep(min(float(r.headers.get("Retry-After", 1)), 0.25 * 2**failures))
                            continue
                        if r.status_code >= 400:
                            r.read()
                            raise ApiError.of(r)
                        total = int(r.headers["X-Row-Groups"])
                        if feature_table is not None:  # a resumed export reads the version it began with
                            params["feature_table_version"] = r.headers["X-Feature-Table-Version"]
                        reader = pa.ipc.open_stream(_Blocks(r.iter_bytes(CHUNK)))
                        if writer is None:
                            writer = pq.ParquetWriter(partial, reader.schema)
                            description = dict(reader.schema.metadata or {})[METADATA_KEY.encode()]
                        for batch in reader:
                            writer.write_batch(batch, row_group_size=max(batch.num_rows, 1))
                            done, rows = done + 1, rows + batch.num_rows
                            if on_row_groups is not None:
                                on_row_groups(done, total)
                    failures = 0
                except (httpx.TransportError, pa.ArrowInvalid) as exc:  # cut mid-stream: resume
                    failures += 1
                    if failures >= attempts:
                        raise ApiError(0, "unreachable", f"{self.http.base_url}: {exc}") from exc
            if writer is None:
                raise ApiError(0, "empty-export", "the export sent no schema")
            writer.close()
            writer = None
            sibling = destination.with_name(destination.name + SIBLING_SUFFIX)
            sibling.write_bytes(description)
            partial.replace(destination)
        finally:
            if writer is not None:
                writer.close()
            partial.unlink(missing_ok=True)
        return rows

    def predictions(
        self,
        model_id: str,
        *,
        example_ids: list[str] | None = None,
        rows: list[dict[str, Any]] | None = None,
        feature_table: str | None = None,
    ) -> Predictions:
        """The model's answer for example IDs of a feature table, or for feature rows."""
        body: dict[str, Any] = {"example_ids": example_ids} if rows is None else {"rows": rows}
        if feature_table is not None:
            body["feature_table"] = feature_table
        return self.call("POST", f"/v1/models/{model_id}/predictions", json=body)

    def predict(self, model_id: str, example_ids: list[str]) -> list[float]:
        return [float(p) for p in self.predictions(model_id, example_ids=example_ids)["predictions"]]

    def received_models(self) -> list[ReceivedModel]:
        """Models trained with semi-sensitive features, received and verified."""
        return list(self.items("/v1/semi-sensitive-models"))

    def received_model(self, model_id: str) -> ReceivedModel:
        return self.call("GET", f"/v1/semi-sensitive-models/{model_id}")

    def received_model_artifact(self, model_id: str) -> bytes:
        """The signed model message exactly as received."""
        return bytes(self.call("GET", f"/v1/semi-sensitive-models/{model_id}/artifact", raw=True))
