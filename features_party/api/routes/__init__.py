"""One router module per resource under /v1 (per tenant; another tenant's resources answer 404)."""

from fastapi import APIRouter

from features_party.api.routes import (
    feature_tables,
    identity,
    joins,
    pricing,
    received_models,
    releases,
    senders,
    training,
)

ROUTERS: tuple[APIRouter, ...] = tuple(
    m.router for m in (identity, senders, pricing, releases, received_models, feature_tables, joins, training)
)
