"""The labels party's client (the advertiser): datasets, labels, releases, budget, deliveries,
semi-sensitive models, audits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from labeldp.client.errors import ApiError
from labeldp.client.transport import ApiClient
from labeldp.client.types import (
    Audit,
    Budget,
    Dataset,
    Delivery,
    HybridPlan,
    Identity,
    LedgerEntry,
    ModelDelivery,
    Page,
    Preview,
    Priors,
    PriorsDetail,
    Recipient,
    Release,
    ReleaseGroup,
    SemiSensitiveModel,
    Upload,
)


class LabelsClient(ApiClient):
    """The labels party (advertiser): datasets, labels, releases, budget, deliveries."""

    def identity(self) -> Identity:
        return self.call("GET", "/v1/identity")

    def recipients(self) -> list[Recipient]:
        return list(self.items("/v1/recipients"))

    def register_recipient(
        self,
        name: str,
        grpc_address: str,
        tls_ca_pem: str | None,
        fingerprint: str,
        recipient_tenant: str | None = None,
    ) -> Recipient:
        """``recipient_tenant``: the publisher's tenant (``tenant_id`` of its identity), named in every
        message to it so that the features party files it for that tenant alone."""
        body = {"name": name, "grpc_address": grpc_address, "fingerprint": fingerprint}
        if tls_ca_pem is not None:
            body["tls_ca_pem"] = tls_ca_pem
        if recipient_tenant is not None:
            body["recipient_tenant"] = recipient_tenant
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
        mechanism: str | None = None,
        example_ids: list[str] | None = None,
        priors_id: str | None = None,
    ) -> Release:
        """``epsilon`` is per example, or per user when ``privacy_unit`` is ``user`` (then with a
        ``contribution_bound``: τ, ``auto`` or ``private``); ``objective``: ``label`` or ``model``;
        ``mechanism``: ``rr_on_bins``, ``rr_top_k`` or ``unbiased`` (None: the service's defaults);
        ``priors_id``: a feature-aware release on stored priors."""
        body: dict[str, Any] = {"recipient": recipient, "loss": loss}
        if example_ids is not None:
            body["example_ids"] = example_ids
        if priors_id is not None:
            body["prior"] = {"from": "features-party", "priors_id": priors_id}
        if objective is not None:
            body["objective"] = objective
        if mechanism is not None:
            body["mechanism"] = mechanism
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
        mechanism: str | None = None,
        *,
        example_ids: list[str] | None = None,
        priors_id: str | None = None,
    ) -> Preview:
        """Free and tenant-only: the mechanism and expected loss a release would have (and, where both
        can serve it, RR-on-Bins's expected loss beside the unbiased randomizer's variance; with
        ``priors_id``, beside the same release without them)."""
        body: dict[str, Any] = {"epsilon": epsilon, "loss": loss, "recipient": "preview"}
        if example_ids is not None:
            body["example_ids"] = example_ids
        if priors_id is not None:
            body["prior"] = {"from": "features-party", "priors_id": priors_id}
        if objective is not None:
            body["objective"] = objective
        if mechanism is not None:
            body["mechanism"] = mechanism
        if epsilon_prior is not None:
            body["epsilon_prior"] = epsilon_prior
        if prior_release_id is not None:
            body["prior_release_id"] = prior_release_id
        return self.call("POST", f"/v1/datasets/{dataset_id}/releases:preview", json=body)

    def release_groups(self, release_id: str) -> list[ReleaseGroup]:
        """A feature-aware release's mechanism per group ([] for a release without priors)."""
        return list(self.items(f"/v1/releases/{release_id}/groups"))

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

    def fetch_priors(
        self,
        dataset_id: str,
        recipient: str,
        max_groups: int = 64,
        loss: str | None = None,
        example_ids: list[str] | None = None,
    ) -> Priors:
        """Ask the recipient (a pinned features party) to price the dataset's examples (default: those a
        release lists); the signed answer is checked and stored. Charges nothing."""
        body: dict[str, Any] = {"recipient": recipient, "max_groups": max_groups}
        if loss is not None:
            body["loss"] = loss
        if example_ids is not None:
            body["example_ids"] = example_ids
        return self.call("POST", f"/v1/datasets/{dataset_id}/priors", json=body)

    def priors(self, dataset_id: str | None = None) -> list[Priors]:
        """A dataset's stored priors, or every one of the tenant."""
        return list(self.items(f"/v1/datasets/{dataset_id}/priors" if dataset_id else "/v1/priors"))

    def get_priors(self, priors_id: str) -> PriorsDetail:
        """Stored priors in full: each group's size and prior on the support."""
        return self.call("GET", f"/v1/priors/{priors_id}")

    def delete_priors(self, priors_id: str) -> None:
        """Delete stored priors (409 ``priors-in-use`` while a charged release that uses them runs)."""
        self.call("DELETE", f"/v1/priors/{priors_id}", raw=True)

    def audit(self, release_id: str) -> Audit:
        """Free and tenant-only: what the best attacker learns from a release (raw labels used)."""
        return self.call("GET", f"/v1/releases/{release_id}/audit")
