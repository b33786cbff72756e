"""The consoles as the servers serve them (no browser: tests/e2e/test_console_browser.py drives one):
the page shell and every module each party serves, with the security headers; only the party's own
files, clean 404s; no HTML-string sink or eval in the modules; and every REST route a console calls
is one of the party's public routes in its OpenAPI document."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest

from features_party.config import FeaturesSettings
from labeldp.console.serve import CSP, STATIC
from labels_party.config import LabelsSettings
from labels_party.storage.db import sqlite_url
from tests.support.servers import features_server_thread, labels_server_thread

PARTIES = ("labels", "features")


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("consoles")
    labels = LabelsSettings(data_dir=tmp / "labels", database_url=sqlite_url(tmp / "labels"))
    features = FeaturesSettings(data_dir=tmp / "features", grpc_port=0, allow_plaintext=True)
    with labels_server_thread(labels) as a, features_server_thread(features) as f:
        yield {"labels": a, "features": f}


def check_headers(response: httpx.Response) -> None:
    headers = response.headers
    assert headers["content-security-policy"] == CSP
    directives = dict(d.strip().split(" ", 1) for d in CSP.split(";"))
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == directives["style-src"] == "'self'"  # no inline, no eval
    assert directives["frame-ancestors"] == "'none'" and directives["object-src"] == "'none'"
    assert directives["require-trusted-types-for"] == "'script'" and directives["trusted-types"] == "'none'"
    assert "unsafe" not in CSP and "http" not in CSP  # nothing inline, evaluated or from elsewhere
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "no-referrer"
    assert "set-cookie" not in headers


class Shell(HTMLParser):
    """What a page shell loads, and anything inline it should not have."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[str] = []
        self.inline: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self._in_script = True
            assert a.get("src"), "a script without src (inline)"
            self.loads.append(str(a["src"]))
        if tag == "link" and a.get("href"):
            self.loads.append(str(a["href"]))
        if tag == "style" or "style" in a or any(k.startswith("on") for k in a):
            self.inline.append(tag)

    def handle_endtag(self, tag: str) -> None:
        self._in_script = self._in_script and tag != "script"

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append("script text")


def imports(source: str) -> list[str]:
    return re.findall(r'^import [^;]*? from "([^"]+)";', source, re.M | re.S)


@pytest.mark.parametrize("party", PARTIES)
def test_each_party_serves_its_console_and_every_module_with_the_security_headers(
    bases: dict[str, str], party: str
) -> None:
    base = bases[party]
    redirect = httpx.get(f"{base}/console")
    assert redirect.status_code == 308 and redirect.headers["location"] == "/console/"
    page = httpx.get(f"{base}/console/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    check_headers(page)
    shell = Shell()
    shell.feed(page.text)
    assert shell.inline == []
    assert all(url.startswith("/console/assets/") for url in shell.loads), shell.loads
    # every module the entry point imports, transitively, is served from this origin with the headers
    pending = [url for url in shell.loads]
    seen: set[str] = set()
    while pending:
        url = pending.pop()
        if url in seen:
            continue
        seen.add(url)
        asset = httpx.get(f"{base}{url}")
        assert asset.status_code == 200, url
        check_headers(asset)
        if url.endswith(".js"):
            assert asset.headers["content-type"].startswith("text/javascript"), url
            folder = url.rsplit("/", 1)[0]
            for target in imports(asset.text):
                assert target.startswith("."), (url, target)  # relative: this origin only
                pending.append(str(Path(folder, target)).replace("\\", "/"))
                pending[-1] = re.sub(r"/[^/]+/\.\./", "/", pending[-1]).replace("/./", "/")
    served = {u.removeprefix("/console/assets/") for u in seen}
    expected = {
        str(p.relative_to(STATIC))
        for folder in ("common", party)
        for p in (STATIC / folder).iterdir()
        if p.suffix in (".js", ".css", ".svg")
    }
    assert served == expected  # every shipped file is reachable, and nothing more is loaded


def test_a_party_serves_only_its_own_console_and_answers_404_problems(bases: dict[str, str]) -> None:
    for party, other in (("labels", "features"), ("features", "labels")):
        base = bases[party]
        for path in (
            f"/console/assets/{other}/main.js",
            "/console/assets/common/nope.js",
            "/console/assets/common/../../serve.py",
            "/console/assets/common/%2e%2e/%2e%2e/serve.py",
            "/console/assets/shell.html",
        ):
            r = httpx.get(f"{base}{path}")
            assert r.status_code == 404, (party, path)
            assert r.headers["content-type"] == "application/problem+json"
            assert r.json()["type"] == "not-found"
        r = httpx.post(f"{base}/console/")
        assert r.status_code == 405 and r.json()["type"] == "method-not-allowed"


@pytest.mark.parametrize("party", PARTIES)
def test_the_console_is_not_part_of_the_api_document(bases: dict[str, str], party: str) -> None:
    paths = httpx.get(f"{bases[party]}/openapi.json", timeout=60).json()["paths"]
    assert not [p for p in paths if p.startswith("/console")]


SINKS = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
    r"setAttribute\(\s*[\"'](?:style|on\w+)|\.style\.|srcdoc|createContextualFragment|DOMParser"
)


def test_no_module_parses_html_strings_or_evaluates_code() -> None:
    """API text must only ever become DOM text: no HTML-string sink, no eval, no inline style — in
    the browser the CSP's Trusted Types would refuse them anyway (the browser tests run under it)."""
    offenders = [
        f"{path.relative_to(STATIC)}:{n}: {line.strip()}"
        for path in STATIC.rglob("*.js")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if SINKS.search(line)
    ]
    assert offenders == []


def called_routes(source: str) -> set[str]:
    """The REST routes a module calls, as templates: literal ``/v1/…`` strings and ``path(…)`` calls
    (string arguments kept, anything else a parameter), with a literal suffix after ``${path(…)}``."""
    routes = {m for m in re.findall(r'"(/v1/[^"?]*)"', source)}
    for args, suffix in re.findall(r"\$?\{?path\(([^()]*)\)\}?([/:][\w:/-]+)?", source):
        parts = [a.strip() for a in args.split(",") if a.strip()]
        if not parts or parts[0].startswith("..."):  # the helper's own definition
            continue
        route = "/v1/" + "/".join(p.strip('"') if p.startswith('"') else "{}" for p in parts)
        routes.add(route + (suffix or ""))
    return routes


def test_every_route_a_console_calls_is_a_public_route_of_its_party(bases: dict[str, str]) -> None:
    """Whatever the console shows, an integrator can get: it calls only routes of the party's OpenAPI
    document (no console-only back door), and each party's console only its own party's routes."""
    for party in PARTIES:
        document: dict[str, Any] = httpx.get(f"{bases[party]}/openapi.json", timeout=60).json()
        public = {re.sub(r"\{[^}]+\}", "{}", p): set(ops) for p, ops in document["paths"].items()}
        calls: set[str] = set()
        for path in [*(STATIC / party).glob("*.js"), *(STATIC / "common").glob("*.js")]:
            calls |= called_routes(path.read_text())
        assert calls, party
        unknown = sorted(c for c in calls if c not in public)
        assert unknown == [], (party, unknown)
    # and the calls cover each console's pages (a regex that stopped matching would pass vacuously)
    labels = set().union(*(called_routes(p.read_text()) for p in (STATIC / "labels").glob("*.js")))
    assert {
        "/v1/datasets",
        "/v1/datasets/{}/budget",
        "/v1/datasets/{}/releases:preview",
        "/v1/releases/{}/audit",
        "/v1/ledger",
    } <= labels
    features = set().union(*(called_routes(p.read_text()) for p in (STATIC / "features").glob("*.js")))
    assert {"/v1/joins", "/v1/models", "/v1/jobs/{}", "/v1/models/{}/artifact", "/v1/senders"} <= features
