"""Thin REST clients for both parties, used by the CLI's client commands, the demo and the audits.

Every answer is typed by the ``TypedDict`` of its route (``labeldp.client_types``, checked against the
servers' OpenAPI documents by tests/e2e/test_cli_client_types.py), so mypy checks the keys callers read.
Every error answer (RFC 9457 problem+json) becomes an ``ApiError`` carrying the problem's fields, so
scripts can branch on the code and people can read the message. Uploads stream from disk in chunks
and report bytes sent, so large files neither sit in memory nor leave the user staring at a silent
terminal.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from labeldp.client_types import (
    Audit,
    Budget,
    Dataset,
    Delivery,
    FeaturesIdentity,
    FeatureTable,
    FieldError,
    HybridPlan,
    Identity,
    Job,
    Join,
    LedgerEntry,
    Model,
    ModelDelivery,
    Page,
    Predictions,
    Preview,
    ReceivedModel,
    ReceivedRelease,
    Recipient,
    Release,
    SemiSensitiveModel,
    Sender,
    Upload,
)

CHUNK = 1 << 20
CONTENT_TYPES = {
    ".csv": "text/csv",
    ".ndjson": "application/x-ndjson",
    ".jsonl": "application/x-ndjson",
    ".parquet": "application/vnd.apache.parquet",
}


LOCATIONS = ("body", "query", "path", "header")  # where FastAPI says a field was: not part of its name


def field_of(error: FieldError) -> str:
    """The request field an invalid-request reason is about (``epsilon``, ``support.k``); ``""`` when it
    is about the request as a whole."""
    loc = error["loc"][1:] if error["loc"][:1] and error["loc"][0] in LOCATIONS else error["loc"]
    return ".".join(loc)


class ApiError(Exception):
    """An error answer from a labeldp service (or no answer at all: ``status`` 0).

    ``code`` is the problem's ``type`` (kebab-case, stable: branch on it), ``title`` the code in words,
    ``detail`` what went wrong for people, ``errors`` each reason an invalid request (422
    ``invalid-request``) was refused — ``field_of(reason)`` names its field — and ``body`` the whole
    problem with any further members (``rows``, ``columns``, ``spent``, ``left``, …). Whose move it is
    next: ``caller_mistake`` (the request itself must change), ``unavailable`` (the service failed or
    was not reached: the same request may succeed later), else the service refused it as things
    stand (a budget, a missing resource, a key)."""

    def __init__(self, status: int, code: str, detail: str, body: dict[str, Any] | None = None) -> None:
        self.status, self.code, self.detail, self.body = status, code, detail, body or {}
        self.title = str(self.body.get("title", code.replace("-", " ")))
        listed = self.body.get("errors")
        self.errors: list[FieldError] = [
            FieldError(loc=[str(x) for x in e.get("loc", [])], msg=str(e.get("msg")), type=str(e.get("type")))
            for e in (listed if isinstance(listed, list) else [])
            if isinstance(e, dict)
        ]
        text = f"{status} {code}: {detail}" if status else f"{code}: {detail}"
        reasons = "; ".join(f"{field_of(e)}: {e['msg']}" if field_of(e) else e["msg"] for e in self.errors)
        super().__init__(f"{text} ({reasons})" if reasons else text)

    @property
    def caller_mistake(self) -> bool:
        """The request itself is wrong (400, 413, 415, 422): sent again unchanged, it fails again."""
        return self.status in (400, 413, 415, 422)

    @property
    def unavailable(self) -> bool:
        """The service failed (5xx) or could not be reached: the same request may succeed later."""
        return self.status >= 500 or self.code == "unreachable"

    @classmethod
    def of(cls, r: httpx.Response) -> ApiError:
        """An error answer (read) with its problem+json fields; any other body becomes its detail."""
        try:
            body = r.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        return cls(
            r.status_code, str(body.get("type", "http-error")), str(body.get("detail", r.text[:500])), body
        )


def content_type_of(path: Path) -> str:
    """The upload's Content-Type from its extension; ``ValueError`` for any other file."""
    try:
        return CONTENT_TYPES[path.suffix.lower()]
    except KeyError:
        raise ValueError(f"{path}: use a .csv, .ndjson/.jsonl or .parquet file") from None


def _chunks(path: Path, on_bytes: Callable[[int], None] | None) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            if on_bytes is not None:
                on_bytes(len(block))
            yield block


class ApiClient:
    """One service: its base URL and a tenant's bearer key."""

    def __init__(self, base_url: str, api_key: str, timeout: float = 600.0) -> None:
        self.http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(timeout, connect=10.0),
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.http.close()

    def call(self, method: str, path: str, *, raw: bool = False, **kwargs: Any) -> Any:
        """The answer parsed (JSON) or as bytes; ``raw`` keeps even JSON as its exact bytes (a signed
        message: the signature covers the bytes). Each method below states the answer's type."""
        try:
            r = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiError(0, "unreachable", f"{self.http.base_url}{path}: {exc}") from exc
        if r.status_code >= 400:
            raise ApiError.of(r)
        json_answer = r.headers.get("content-type", "").startswith(
            ("application/json", "application/problem+json")
        )
        return r.json() if json_answer and not raw else r.content

    def items(self, path: str, *, page_size: int = 1000, **params: Any) -> Iterator[Any]:
        """Every item of a paged list, following its ``next`` links."""
        page: Page[Any] = self.call("GET", path, params={**params, "limit": page_size})
        while True:
            yield from page["items"]
            if page["next"] is None:
                return
            page = self.call("GET", page["next"])

    def upload(self, path: str, file: Path, on_bytes: Callable[[int], None] | None = None) -> Any:
        """PUT a file, streamed in 1 MiB chunks (the type follows the file's extension)."""
        headers = {"Content-Type": content_type_of(file), "Content-Length": str(file.stat().st_size)}
        return self.call("PUT", path, content=_chunks(file, on_bytes), headers=headers)


class LabelsClient(ApiClient):
    """The labels party (advertiser): datasets, labels, releases, budget, deliveries."""

    def identity(self) -> Identity:
        return self.call("GET", "/v1/identity")

    def recipients(self) -> list[Recipient]:
        return list(self.items("/v1/recipients"))

    def register_recipient(
        self, name: str, grpc_address: str, tls_ca_pem: str | None, fingerprint: str
    ) -> Recipient:
        body = {"name": name, "grpc_address": grpc_address, "fingerprint": fingerprint}
        if tls_ca_pem is not None:
            body["tls_ca_pem"] = tls_ca_pem
        return self.call("POST", "/v1/recipients", json=body)

    def create_dataset(self, spec: dict[str, Any]) -> Dataset:
        return self.call("POST", "/v1/datasets", json=spec)

    def delete_dataset(self, dataset_id: str) -> None:
        """Delete a dataset nothing was released from (409 ``dataset-in-use`` otherwise)."""
        self.call("DELETE", f"/v1/datasets/{dataset_id}", raw=True)

    def datasets(self) -> list[Dataset]:
        return list(self.items("/v1/datasets"))

    def dataset(self, name_or_id: str) -> Dataset:
        """A dataset by its name or its id."""
        for ds in self.datasets():
            if name_or_id in (ds["id"], ds["name"]):
                return ds
        raise ApiError(404, "not-found", f"no dataset named {name_or_id!r}")

    def dataset_id(self, name_or_id: str) -> str:
        return self.dataset(name_or_id)["id"]

    def releases(self, dataset_id: str | None = None) -> list[Release]:
        """A dataset's releases, or every release of the tenant."""
        return list(self.items(f"/v1/datasets/{dataset_id}/releases" if dataset_id else "/v1/releases"))

    def get_release(self, release_id: str) -> Release:
        return self.call("GET", f"/v1/releases/{release_id}")

    def deliveries(self, release_id: str) -> list[Delivery]:
        return list(self.items(f"/v1/releases/{release_id}/deliveries"))

    def ledger(self, limit: int | None = None) -> list[LedgerEntry]:
        """The tenant's ledger entries, oldest first (all of them, or the first ``limit``)."""
        if limit is not None:
            page: Page[LedgerEntry] = self.call("GET", "/v1/ledger", params={"limit": limit})
            return page["items"]
        return list(self.items("/v1/ledger"))

    def upload_labels(
        self, dataset_id: str, file: Path, on_bytes: Callable[[int], None] | None = None
    ) -> Upload:
        return self.upload(f"/v1/datasets/{dataset_id}/labels", file, on_bytes)

    def upload_universe(
        self, dataset_id: str, file: Path, on_bytes: Callable[[int], None] | None = None
    ) -> Upload:
        return self.upload(f"/v1/datasets/{dataset_id}/universe", file, on_bytes)

    def release(
        self,
        dataset_id: str,
        epsilon: float,
        recipient: str,
        loss: str,
        idempotency_key: str,
        epsilon_prior: float | None = None,
        *,
        privacy_unit: str = "example",
        contribution_bound: int | str | None = None,
        objective: str | None = None,
    ) -> Release:
        """``epsilon`` is per example, or per user when ``privacy_unit`` is ``user`` (then with a
        ``contribution_bound``: τ, ``auto`` or ``private``); ``objective``: ``label`` or ``model``
        (None: the service's default)."""
        body: dict[str, Any] = {"recipient": recipient, "loss": loss}
        if objective is not None:
            body["objective"] = objective
        if privacy_unit == "user":
            body.update(privacy_unit="user", epsilon_user=epsilon, contribution_bound=contribution_bound)
        else:
            body["epsilon"] = epsilon
        if epsilon_prior is not None:
            body["epsilon_prior"] = epsilon_prior
        return self.call(
            "POST",
            f"/v1/datasets/{dataset_id}/releases",
            json=body,
            headers={"Idempotency-Key": idempotency_key},
        )

    def preview(
        self,
        dataset_id: str,
        epsilon: float,
        loss: str,
        epsilon_prior: float | None = None,
        prior_release_id: str | None = None,
        objective: str | None = None,
    ) -> Preview:
        """Free and tenant-only: the mechanism and expected loss a release would have."""
        body: dict[str, Any] = {"epsilon": epsilon, "loss": loss, "recipient": "preview"}
        if objective is not None:
            body["objective"] = objective
        if epsilon_prior is not None:
            body["epsilon_prior"] = epsilon_prior
        if prior_release_id is not None:
            body["prior_release_id"] = prior_release_id
        return self.call("POST", f"/v1/datasets/{dataset_id}/releases:preview", json=body)

    def deliver(self, release_id: str) -> Delivery:
        return self.call("POST", f"/v1/releases/{release_id}/deliveries")

    def budget(self, dataset_id: str, epsilon: float, epsilon_user: float | None = None) -> Budget:
        params = {"epsilon": epsilon, "epsilon_user": epsilon if epsilon_user is None else epsilon_user}
        return self.call("GET", f"/v1/datasets/{dataset_id}/budget", params=params)

    def noisy_labels(self, release_id: str) -> bytes:
        return bytes(self.call("GET", f"/v1/releases/{release_id}/noisy-labels"))

    def upload_non_sensitive(
        self, dataset_id: str, file: Path, on_bytes: Callable[[int], None] | None = None
    ) -> Upload:
        return self.upload(f"/v1/datasets/{dataset_id}/non-sensitive-features", file, on_bytes)

    def create_model(self, dataset_id: str, body: dict[str, Any], idempotency_key: str) -> SemiSensitiveModel:
        """Charge (ε₂, δ) and train with semi-sensitive features (docs/semi-sensitive.md)."""
        return self.call(
            "POST",
            f"/v1/datasets/{dataset_id}/semi-sensitive-models",
            json=body,
            headers={"Idempotency-Key": idempotency_key},
        )

    def plan_model(self, dataset_id: str, body: dict[str, Any]) -> HybridPlan:
        """The public plan for a total (ε, δ): whether the label phase runs and each phase's ε (free)."""
        return self.call("POST", f"/v1/datasets/{dataset_id}/semi-sensitive-models:plan", json=body)

    def model(self, model_id: str) -> SemiSensitiveModel:
        return self.call("GET", f"/v1/semi-sensitive-models/{model_id}")

    def deliver_model(self, model_id: str) -> ModelDelivery:
        return self.call("POST", f"/v1/semi-sensitive-models/{model_id}/deliveries")

    def model_message(self, model_id: str) -> bytes:
        """The signed model message's exact bytes."""
        return bytes(self.call("GET", f"/v1/semi-sensitive-models/{model_id}/message", raw=True))

    def audit(self, release_id: str) -> Audit:
        """Free and tenant-only: what the best attacker learns from a release (raw labels used)."""
        return self.call("GET", f"/v1/releases/{release_id}/audit")


class FeaturesClient(ApiClient):
    """The features party (publisher): senders, feature tables, joins, training, predictions."""

    def identity(self) -> FeaturesIdentity:
        return self.call("GET", "/v1/identity")

    def senders(self) -> list[Sender]:
        return list(self.items("/v1/senders"))

    def pin_sender(self, sender_id: str, public_key_pem: str) -> Sender:
        return self.call("POST", "/v1/senders", json={"id": sender_id, "public_key_pem": public_key_pem})

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
