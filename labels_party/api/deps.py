"""The labels party's typed request dependencies: the services built once per app, and the caller.

Routes declare what they need as annotated parameters (``caller: Caller, releases: Releases``);
nothing reads ``app.state`` except ``services`` below. What only reads the app's state is ``async``, so
FastAPI runs it on the event loop: a plain function would be a trip to the thread pool and back (two
hand-overs of the interpreter lock) on every request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, cast

from fastapi import Depends, Request

from labeldp.common.api_keys import Authenticated, Bearer, bearer_token, invalid_key
from labeldp.common.db import Sessions
from labeldp.common.instance import Instance
from labels_party.config import LabelsSettings
from labels_party.datasets.budget import BudgetService
from labels_party.datasets.service import DatasetService
from labels_party.delivery.message import Signer
from labels_party.delivery.service import DeliveryService, RecipientService
from labels_party.priors import PriorsService
from labels_party.releases.service import ReleaseService
from labels_party.semi_sensitive.service import SemiSensitiveService
from labels_party.tenants import authenticate


@dataclass(frozen=True)
class LabelsServices:
    settings: LabelsSettings
    sessions: Sessions
    signer: Signer
    instance: Instance
    datasets: DatasetService
    releases: ReleaseService
    budget: BudgetService
    recipients: RecipientService
    deliveries: DeliveryService
    semi_sensitive: SemiSensitiveService
    priors: PriorsService


async def services(request: Request) -> LabelsServices:
    return cast(LabelsServices, request.app.state.services)


Services = Annotated[LabelsServices, Depends(services)]


async def caller(credentials: Bearer, svc: Services) -> Authenticated:
    """The tenant of a valid bearer key (401 otherwise): a short read, asked by every request."""
    token = bearer_token(credentials)

    def find() -> Authenticated | None:
        with svc.sessions() as session:
            return authenticate(session, token)

    key = await svc.sessions.read(find)
    if key is None:
        raise invalid_key()
    return key


Caller = Annotated[Authenticated, Depends(caller)]


async def _datasets(svc: Services) -> DatasetService:
    return svc.datasets


async def _releases(svc: Services) -> ReleaseService:
    return svc.releases


async def _budget(svc: Services) -> BudgetService:
    return svc.budget


async def _recipients(svc: Services) -> RecipientService:
    return svc.recipients


async def _deliveries(svc: Services) -> DeliveryService:
    return svc.deliveries


Datasets = Annotated[DatasetService, Depends(_datasets)]
Releases = Annotated[ReleaseService, Depends(_releases)]
Budget = Annotated[BudgetService, Depends(_budget)]
Recipients = Annotated[RecipientService, Depends(_recipients)]
Deliveries = Annotated[DeliveryService, Depends(_deliveries)]


async def _semi_sensitive(svc: Services) -> SemiSensitiveService:
    return svc.semi_sensitive


SemiSensitive = Annotated[SemiSensitiveService, Depends(_semi_sensitive)]


async def _priors(svc: Services) -> PriorsService:
    return svc.priors


PriorsApi = Annotated[PriorsService, Depends(_priors)]
