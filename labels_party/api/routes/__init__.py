"""One router module per resource under /v1; another tenant's resources answer 404 like missing ones."""

from fastapi import APIRouter

from labels_party.api.routes import (
    budget,
    datasets,
    deliveries,
    identity,
    priors,
    recipients,
    releases,
    semi_sensitive_models,
)

ROUTERS: tuple[APIRouter, ...] = tuple(
    m.router
    for m in (identity, recipients, datasets, priors, releases, semi_sensitive_models, budget, deliveries)
)
