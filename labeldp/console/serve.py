"""Serving the console: ``/console/`` (the page shell), ``/console/assets/common/…`` (shared modules,
styles) and ``/console/assets/<party>/…`` (the party's pages), every answer with the same security
headers.

The console reads only the public API, with the key in ``Authorization`` (never a cookie), so a
cross-site page can neither read nor ride the session: there is no ambient credential to forge a
request with (no CSRF). The CSP allows scripts, styles, images and fetches from this origin only, no
inline script or style and no ``eval``; Trusted Types with no policy turn any HTML-string sink
(``innerHTML`` and its kind) into an error, so API text can only become DOM text; no page may frame
the console. Nothing is fetched from elsewhere: every asset ships in the package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

Party = Literal["labels", "features"]
STATIC = Path(__file__).parent / "static"
TITLES: dict[Party, str] = {
    "labels": "labels party (advertiser)",
    "features": "features party (publisher)",
}
CSP = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
        "require-trusted-types-for 'script'",
        "trusted-types 'none'",
    )
)
HEADERS: dict[str, str] = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
    "Cache-Control": "no-cache",  # revalidated (ETag) so that an upgraded service serves new pages
}
_RAW_HEADERS = [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]


class Hardened:
    """An ASGI app whose every response carries ``HEADERS`` (its own same-named headers replaced)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                ours = {name for name, _ in _RAW_HEADERS}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in ours]
                message = {**message, "headers": kept + _RAW_HEADERS}
            await send(message)

        await self.app(scope, receive, with_headers)


def shell(party: Party) -> str:
    """The page shell with the party's title and entry module (constants only, never request data)."""
    template = (STATIC / "shell.html").read_text(encoding="utf-8")
    return template.replace("{{title}}", TITLES[party]).replace("{{party}}", party)


def install(app: FastAPI, party: Party) -> None:
    """Serve this party's console on the app's own port (left out of the OpenAPI document)."""
    page = shell(party)
    app.mount("/console/assets/common", Hardened(StaticFiles(directory=STATIC / "common")), "console-common")
    app.mount(f"/console/assets/{party}", Hardened(StaticFiles(directory=STATIC / party)), "console-party")

    @app.get("/console", include_in_schema=False)
    def console_root() -> RedirectResponse:
        return RedirectResponse("/console/", status_code=308, headers=HEADERS)

    @app.get("/console/", include_in_schema=False)
    def console_page() -> HTMLResponse:
        return HTMLResponse(page, headers=HEADERS)
