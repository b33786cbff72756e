"""One router module per resource under /v1 (per tenant; another tenant's resources answer 404)."""

from fastapi import APIRouter

from features_party.api.routes import feature_tables, identity, joins, releases, senders, training

ROUTERS: tuple[APIRouter, ...] = tuple(
    m.router for m in (identity, senders, releases, feature_tables, joins, training)
)
