"""Every error answer of a labeldp service (RFC 9457 problem+json), or no answer at all, as one
``ApiError`` carrying the problem's fields: scripts branch on its code, people read its message."""

from __future__ import annotations

from typing import Any

import httpx

from labeldp.client.types import (
    FieldError,
)

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
