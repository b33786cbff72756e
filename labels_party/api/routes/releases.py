"""``/v1/datasets/{id}/releases`` and ``/v1/releases``: charge, privatize, read the output."""

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import FileResponse

from labeldp.common.errors import DomainError
from labeldp.common.openapi import REPLAYED, errors
from labeldp.common.pages import Page, Paging
from labels_party.api.deps import Caller, Releases, Services
from labels_party.api.schemas.budget import BudgetRefusal
from labels_party.api.schemas.releases import (
    AuditOut,
    GroupOut,
    PreviewIn,
    PreviewOut,
    ReleaseIn,
    ReleaseOut,
)

# what a release or a preview refuses in its request, before anything is charged
RELEASE_422 = (
    "`invalid-epsilon`: ε (or its split) outside what the service takes (the field in `parameter`); "
    "`invalid-request`: parameters "
    "that do not fit together (e.g. contribution_bound without privacy_unit user); `invalid-prior`: a "
    "public_prior of the wrong length or masses; `invalid-loss`: a loss the dataset's label type does not "
    "take; `invalid-parameter`: parameters the mechanisms refuse; "
    "`user-delta-too-large`: δ_τ would reach 1; `empty-release`: no labels, or no example to release; "
    "`duplicate-example-id`, `unknown-example-ids`: example_ids repeats one, or names some the dataset "
    "lacks (how many in `unknown`, the first 10 in `example_ids`); `missing-labels`: universe examples "
    "without a label and no default_label; `unknown-priors`: prior.priors_id names no stored priors of "
    "this tenant; `priors-mismatch`: the priors were made for another dataset or support, or name an "
    "example the release does not list"
)
router = APIRouter(prefix="/v1", tags=["releases"])


@router.post(
    "/datasets/{dataset_id}/releases",
    status_code=201,
    response_model=ReleaseOut,
    responses={
        200: {
            "model": ReleaseOut,
            "description": "a replay: the release this key created, in its current state; nothing charged "
            "(`Idempotent-Replayed: true`)",
        },
        202: {
            "model": ReleaseOut,
            "description": "with `Prefer: respond-async`: charged, randomizing; poll the release",
        },
        **errors(
            s400="`idempotency-key-required`: send an Idempotency-Key header",
            s422=RELEASE_422 + "; `idempotency-key-reused`: the key was used for a request that differs "
            "once defaults are applied (the differing fields named in `fields`; nothing charged); "
            "`unknown-recipient`: no recipient of that name",
            s503="`cluster-unavailable`: the configured Dask cluster did not answer; `ledger-contention`: "
            "concurrent charges kept this one from committing — retry (nothing charged either way)",
        ),
        409: {
            "model": BudgetRefusal,
            "description": "`budget-exhausted`, `user-budget-exhausted`, `delta-budget-exhausted`: the "
            "charge would overspend (nothing charged, no noise drawn); what the release's examples "
            "(users) have spent and have left, the typical and the worst, in `spent` and `left`",
        },
    },
)
def create_release(
    dataset_id: str,
    body: ReleaseIn,
    caller: Caller,
    releases: Releases,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            max_length=200,
            pattern=r"^[!-~]+$",
            description="required: a retry with the same key and request (defaults applied) returns the "
            "first answer",
        ),
    ] = None,
    prefer: Annotated[str | None, Header(max_length=200)] = None,
) -> ReleaseOut:
    """Charge the budget, then privatize every label once. Needs an ``Idempotency-Key`` header:
    the same key with the same request (defaults applied: a retry may leave out a defaulted field)
    returns the original release, says so in ``Idempotent-Replayed``, and charges nothing. With
    ``Prefer: respond-async`` the answer is 202 right after the charge (status ``charged``); poll
    ``GET /v1/releases/{id}`` until it is ``complete``."""
    if not idempotency_key:
        raise DomainError(
            "idempotency-key-required", "send an Idempotency-Key header with every release", status=400
        )
    wait = "respond-async" not in (prefer or "").lower()
    release, created = releases.create(
        caller.tenant_id, caller.api_key_id, dataset_id, body.request(), idempotency_key, wait=wait
    )
    response.headers[REPLAYED] = "false" if created else "true"  # the body stays the first answer's
    if not created:
        response.status_code = 200
    elif release.status == "charged":
        response.status_code = 202
        response.headers["Location"] = f"/v1/releases/{release.id}"
        response.headers["Preference-Applied"] = "respond-async"
    return ReleaseOut.of(release)


@router.post(
    "/datasets/{dataset_id}/releases:preview",
    response_model=PreviewOut,
    responses=errors(s422=RELEASE_422),
)
def preview_release(dataset_id: str, body: PreviewIn, caller: Caller, releases: Releases) -> PreviewOut:
    """Free: the mechanism and expected loss a release would have under the exact histogram.
    Spends nothing, draws no noise, and is for the tenant's eyes only."""
    return PreviewOut.of(
        releases.preview(
            caller.tenant_id,
            dataset_id,
            body.request(),
            prior_release_id=body.prior_release_id,
            public_prior=body.public_prior,
        )
    )


@router.get("/datasets/{dataset_id}/releases", response_model=Page[ReleaseOut])
async def list_releases(
    dataset_id: str, caller: Caller, releases: Releases, paging: Paging, request: Request, svc: Services
) -> Page[ReleaseOut]:
    """The dataset's releases, newest first (a page): status, ε, examples, recipient."""
    rows = await svc.sessions.read(lambda: releases.of_dataset(caller.tenant_id, dataset_id, paging))
    return Page[ReleaseOut].of(rows, paging, request, ReleaseOut.of)


@router.get("/releases", response_model=Page[ReleaseOut])
async def list_all_releases(
    caller: Caller, releases: Releases, paging: Paging, request: Request, svc: Services
) -> Page[ReleaseOut]:
    """Every release of the tenant, whatever its dataset, oldest first."""
    rows = await svc.sessions.read(lambda: releases.of_tenant(caller.tenant_id, paging))
    return Page[ReleaseOut].of(rows, paging, request, ReleaseOut.of)


@router.get("/releases/{release_id}", response_model=ReleaseOut)
async def get_release(release_id: str, caller: Caller, releases: Releases, svc: Services) -> ReleaseOut:
    """One release: its status, ε spent (per example and per user), its mechanism once complete, its
    error if it failed."""
    return ReleaseOut.of(await svc.sessions.read(lambda: releases.get(caller.tenant_id, release_id)))


@router.get(
    "/releases/{release_id}/audit",
    response_model=AuditOut,
    responses=errors(
        s409="`release-not-complete`; `no-labels`: a release made before releases kept a record, whose "
        "dataset holds no labels for its examples now"
    ),
)
def audit_release(
    release_id: str,
    caller: Caller,
    releases: Releases,
    alpha: Annotated[
        float,
        Query(
            gt=0,
            lt=1,
            allow_inf_nan=False,
            description="false-alarm rate of the ε lower bound (the canary check's alpha)",
        ),
    ] = 1e-6,
) -> AuditOut:
    """Free and for the tenant's eyes only (like the preview): what the best attacker learns from this
    release, computed with the raw labels it randomized (its record), and the canary check's lower bound on
    the ε the sampler implements, with the release's examples as the canaries. Spends nothing, goes to
    no recipient, and is never logged."""
    return AuditOut.of(releases.audit(caller.tenant_id, release_id, alpha))


@router.get(
    "/releases/{release_id}/groups",
    response_model=Page[GroupOut],
    responses=errors(s409="`release-not-complete`"),
)
def get_groups(
    release_id: str, caller: Caller, releases: Releases, paging: Paging, request: Request
) -> Page[GroupOut]:
    """A feature-aware release's mechanism per group, in group order (a page) — each optimal for its
    group's prior, as the message states them — and how many examples each released (none for a
    release without priors)."""
    found = releases.groups(caller.tenant_id, release_id)
    window = found[paging.offset : paging.offset + paging.limit + 1]
    return Page[GroupOut].of(
        window, paging, request, lambda g: GroupOut(group=g[0], examples=g[1], mechanism=g[2])
    )


@router.get(
    "/releases/{release_id}/noisy-labels",
    response_class=FileResponse,
    responses={
        200: {
            "content": {"application/vnd.apache.parquet": {}},
            "description": "example_id, bin (and group for a feature-aware release: -1 for none)",
        },
        **errors(s409="`release-not-complete`"),
    },
)
def get_noisy_labels(release_id: str, caller: Caller, releases: Releases) -> FileResponse:
    """The stored output (Parquet: example_id, bin; a feature-aware release's also group) exactly as it
    will be delivered; reading it is free."""
    path = releases.output_path(caller.tenant_id, release_id)
    return FileResponse(path, media_type="application/vnd.apache.parquet", filename=f"{release_id}.parquet")
