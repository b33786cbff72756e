"""The features party's client (the publisher): senders, received releases and models, feature
tables, joins, training, predictions."""

from __future__ import annotations

import time
from collections.abc import Callable
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
    ) -> Job:
        body = {
            "release_id": release_id,
            "feature_table": feature_table,
            "model": model,
            "debias": debias,
            "validation_fraction": validation_fraction,
        }
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
