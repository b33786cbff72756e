"""Obtaining priors for a dataset from a pinned features party, and keeping them.

Nothing is charged: the request carries example IDs and public parameters only (the label type, the
loss, the support, G), and no label is read (``examples.py``). Everything the request determines is
checked before the recipient is dialled; the answer is checked in full before anything is stored
(``exchange.py``, ``verify.py``); a failure of any kind leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.errors import DomainError
from labeldp.common.instance import Instance
from labeldp.common.pages import PageRequest
from labeldp.common.wire.format import WireError
from labeldp.priors import MAX_GROUP_CELLS, MAX_GROUPS
from labels_party.config import LabelsSettings
from labels_party.datasets.service import get_dataset
from labels_party.datasets.spec import DatasetSpec
from labels_party.datasets.store import DatasetFiles
from labels_party.delivery.addresses import UnresolvedError, check_address, dial_target
from labels_party.delivery.client import Outcome
from labels_party.delivery.message import Signer
from labels_party.delivery.service import credentials_for, told
from labels_party.metrics import LabelsMetrics
from labels_party.priors.examples import listed_examples
from labels_party.priors.exchange import Asked, Exchange, PriorsRefusedError
from labels_party.priors.store import PriorsStore, group_sizes, read_matrix, stored_header
from labels_party.storage.data_dir import DataDir
from labels_party.storage.orm import Priors, Recipient

log = logging.getLogger("labeldp.labels.priors")
DEFAULT_MAX_GROUPS = 64


@dataclass(frozen=True)
class PriorsDetail:
    """Stored priors for a person to inspect: each group's size and prior on the support."""

    row: Priors
    support: tuple[float, ...]
    sizes: list[int]
    without_group: int
    priors: list[list[float]]


@dataclass(frozen=True)
class PriorsRequest:
    recipient: str
    max_groups: int = DEFAULT_MAX_GROUPS
    loss: str | None = None  # None: the label type's default (as a release)
    example_ids: list[str] | None = None  # None: the examples a release lists


class PriorsService:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        data_dir: DataDir,
        signer: Signer,
        settings: LabelsSettings,
        instance: Instance,
        metrics: LabelsMetrics | None = None,
    ) -> None:
        self.sessions, self.data_dir, self.signer = sessions, data_dir, signer
        self.settings, self.instance = settings, instance
        self.metrics = metrics or LabelsMetrics()
        self.store = PriorsStore(sessions, data_dir)

    def fetch(self, tenant_id: str, dataset_id: str, request: PriorsRequest) -> Priors:
        """Ask the recipient for priors of the dataset's examples and store the checked answer (201);
        502 ``priors-refused`` when it refuses or its answer fails a check (nothing stored)."""
        try:
            row = self._fetch(tenant_id, dataset_id, request)
        except PriorsRefusedError:
            self.metrics.priors.labels("refused").inc()
            raise
        except DomainError:
            self.metrics.priors.labels("rejected").inc()
            raise
        self.metrics.priors.labels("stored").inc()
        return row

    def _fetch(self, tenant_id: str, dataset_id: str, request: PriorsRequest) -> Priors:
        with self.sessions() as session:
            ds = get_dataset(session, tenant_id, dataset_id)
            recipient = session.execute(
                select(Recipient).where(Recipient.tenant_id == tenant_id, Recipient.name == request.recipient)
            ).scalar_one_or_none()
        spec = DatasetSpec.model_validate(ds.spec)
        loss = spec.loss(request.loss)
        support = spec.support_for(loss)
        if not 1 <= request.max_groups <= MAX_GROUPS or request.max_groups * support.k > MAX_GROUP_CELLS:
            raise DomainError(
                "invalid-max-groups",
                f"max_groups must lie in [1, {MAX_GROUPS}] with max_groups × support points ≤ "
                f"{MAX_GROUP_CELLS} (this dataset's support has {support.k})",
            )
        if recipient is None:
            raise DomainError("unknown-recipient", f"no registered recipient named {request.recipient!r}")
        ids, keys = listed_examples(DatasetFiles(self.data_dir, ds.id), ds, request.example_ids)
        exchange = self._exchange(recipient)
        asked = Asked(
            features_party=recipient.name,
            recipient_tenant=recipient.recipient_tenant or "",
            label_type=spec.label_type,
            loss=loss,
            support=tuple(float(v) for v in support.values),
            max_groups=request.max_groups,
        )
        try:
            answer, attempts, status, detail = exchange.run(
                asked, ids, self.data_dir.spool(self.instance.token)
            )
        except WireError as exc:
            log.warning("priors refused", extra={"dataset_id": dataset_id, "status": exc.code})
            raise PriorsRefusedError(f"the features party's answer failed a check: {exc.detail}") from exc
        if answer is None:
            told_detail = told(Outcome(False, attempts, status, detail, None, 0), dataset_id)
            raise PriorsRefusedError(f"the recipient answered {status}: {told_detail}", status, attempts)
        header = answer.header
        row = Priors(
            id=str(uuid.uuid4()),
            tenant_id=tenant_id,
            dataset_id=ds.id,
            recipient_id=recipient.id,
            features_priors_id=header.priors_id,
            request_id=header.request_id,
            model_id=header.model_id,
            rule=header.rule,
            loss=loss,
            groups=int(answer.priors.shape[0]),
            max_groups=request.max_groups,
            support_k=support.k,
            examples_requested=len(ids),
            examples_priced=int((answer.groups >= 0).sum()),
            message_sha256=_digest(answer.frames),
        )
        self.store.add(row, ids, keys, answer.groups, answer.priors, answer.frames)
        log.info("priors stored", extra={"priors_id": row.id, "dataset_id": ds.id, "examples": len(ids)})
        return row

    def list(self, tenant_id: str, paging: PageRequest, dataset_id: str | None = None) -> list[Priors]:
        if dataset_id is not None:
            with self.sessions() as session:
                get_dataset(session, tenant_id, dataset_id)
        return self.store.list(tenant_id, paging, dataset_id)

    def get(self, tenant_id: str, priors_id: str) -> Priors:
        return self.store.get(tenant_id, priors_id)

    def detail(self, tenant_id: str, priors_id: str) -> PriorsDetail:
        row = self.store.get(tenant_id, priors_id)
        try:
            sizes, without = group_sizes(self.data_dir, row.id, row.groups)
            matrix = read_matrix(self.data_dir, row.id)
            support = tuple(stored_header(self.data_dir, row.id).support)
        except FileNotFoundError as exc:  # deleted meanwhile
            raise DomainError("not-found", f"no priors {priors_id}", status=404) from exc
        return PriorsDetail(row, support, sizes, without, matrix.tolist())

    def delete(self, tenant_id: str, priors_id: str) -> None:
        self.store.delete(tenant_id, priors_id)

    def _exchange(self, recipient: Recipient) -> Exchange:
        """How to reach the recipient, checked before it is dialled: a pinned key (409
        ``recipient-not-pinned``: the answer's signature could not be checked), an address (409), TLS
        (409 ``tls-not-configured`` unless plaintext is allowed), an address that may be dialled."""
        if not recipient.fingerprint:
            raise DomainError(
                "recipient-not-pinned",
                f"recipient {recipient.name!r} has no key fingerprint: register its identity's key_id to "
                "check the priors it signs",
                status=409,
            )
        if not recipient.grpc_address:
            raise DomainError(
                "recipient-has-no-address", f"recipient {recipient.name!r} has no grpc_address", status=409
            )
        check_address(recipient.grpc_address, self.settings.recipient_hosts)
        credentials = credentials_for(recipient, self.settings)
        try:
            target = dial_target(recipient.grpc_address, self.settings.recipient_hosts)
        except UnresolvedError as exc:
            log.warning("priors: the recipient's name did not resolve: %s", exc)
            raise PriorsRefusedError("the recipient could not be reached", "UNAVAILABLE") from exc
        return Exchange(
            self.signer,
            target,
            credentials,
            recipient.fingerprint,
            timeout_s=self.settings.delivery_timeout_seconds,
            attempts=self.settings.delivery_attempts,
        )


def _digest(frames: list[bytes]) -> str:
    digest = hashlib.sha256()
    for frame in frames:
        digest.update(frame)
    return digest.hexdigest()
