"""The features party's typed request dependencies: the services built once per app, and the caller.

What only reads the app's state is ``async``, so FastAPI runs it on the event loop: a plain function
would be a trip to the thread pool and back (two hand-overs of the interpreter lock) on every request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, cast

from fastapi import Depends, Request

from features_party.config import FeaturesSettings
from features_party.exports import Exports
from features_party.pricing import PricingGrants, Pricings
from features_party.receiver.store import ReceivedModels, ReceivedReleases, SenderRegistry
from features_party.tables.service import FeatureTables
from features_party.tenants import authenticate
from features_party.training.service import TrainingService
from labeldp.common.api_keys import Authenticated, Bearer, bearer_token, invalid_key
from labeldp.common.db import Sessions
from labeldp.common.identity import Identity
from labeldp.common.instance import Instance


@dataclass
class FeaturesServices:
    settings: FeaturesSettings
    sessions: Sessions
    instance: Instance
    identity: Identity
    senders: SenderRegistry
    releases: ReceivedReleases
    models: ReceivedModels
    tables: FeatureTables
    training: TrainingService
    grants: PricingGrants
    pricings: Pricings
    exports: Exports
    grpc_port: int = 0  # set once the receiver listens


async def services(request: Request) -> FeaturesServices:
    return cast(FeaturesServices, request.app.state.services)


Services = Annotated[FeaturesServices, Depends(services)]


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


async def _senders(svc: Services) -> SenderRegistry:
    return svc.senders


async def _releases(svc: Services) -> ReceivedReleases:
    return svc.releases


async def _tables(svc: Services) -> FeatureTables:
    return svc.tables


async def _training(svc: Services) -> TrainingService:
    return svc.training


Senders = Annotated[SenderRegistry, Depends(_senders)]
Releases = Annotated[ReceivedReleases, Depends(_releases)]
Tables = Annotated[FeatureTables, Depends(_tables)]
Training = Annotated[TrainingService, Depends(_training)]


async def _models(svc: Services) -> ReceivedModels:
    return svc.models


ReceivedModelStore = Annotated[ReceivedModels, Depends(_models)]


async def _grants(svc: Services) -> PricingGrants:
    return svc.grants


async def _pricings(svc: Services) -> Pricings:
    return svc.pricings


Grants = Annotated[PricingGrants, Depends(_grants)]
PricingLog = Annotated[Pricings, Depends(_pricings)]


async def _exports(svc: Services) -> Exports:
    return svc.exports


ExportService = Annotated[Exports, Depends(_exports)]
