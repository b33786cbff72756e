"""The one domain error of labeldp's services, and how it reaches a caller.

Every failure a caller caused or can act on — a bad upload, an unknown dataset, an exhausted budget,
a refused message — is a ``DomainError``: a machine-readable ``code``, a human ``detail``, the HTTP
``status`` and gRPC status it is answered with, and any structured ``extra`` (offending rows,
columns, counts). Services raise it; the shared service set-up (``labeldp.common.service``) turns it
into RFC 9457 problem+json, the gRPC receiver into a status with details. Nothing converts by hand.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

PROBLEM = "application/problem+json"

_GRPC_FOR_HTTP = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "FAILED_PRECONDITION",
    412: "FAILED_PRECONDITION",
    413: "RESOURCE_EXHAUSTED",
    415: "INVALID_ARGUMENT",
    422: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
}


class DomainError(Exception):
    """A failure with a machine-readable ``code`` (kebab-case, stable) and a human ``detail``."""

    def __init__(
        self, code: str, detail: str, *, status: int = 422, grpc_code: str | None = None, **extra: Any
    ) -> None:
        super().__init__(detail)
        self.code, self.detail, self.status, self.extra = code, detail, status, extra
        self.grpc_code = grpc_code or _GRPC_FOR_HTTP.get(status, "INTERNAL" if status >= 500 else "UNKNOWN")

    def __str__(self) -> str:
        return self.detail

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled whole — its class, status, gRPC code and extras — so that one raised in a child
        process (``offload.py``) reaches the caller as it was raised (an exception's default pickling
        calls ``cls(*args)``, which keyword-only fields do not survive)."""
        return (_restore, (type(self), self.args, dict(self.__dict__)))


def _restore(cls: type[DomainError], args: tuple[Any, ...], state: dict[str, Any]) -> DomainError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


def not_found(what: str, ident: object) -> DomainError:
    """Missing, or another tenant's: the two answers are indistinguishable on purpose."""
    return DomainError("not-found", f"no {what} {ident}", status=404)


def problem_response(status: int, code: str, detail: str, **extra: Any) -> JSONResponse:
    body = {"type": code, "title": code.replace("-", " "), "status": status, "detail": detail, **extra}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def as_problem(exc: DomainError) -> JSONResponse:
    return problem_response(exc.status, exc.code, exc.detail, **exc.extra)
