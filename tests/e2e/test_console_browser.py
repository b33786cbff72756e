"""Both consoles in a real browser (headless Chromium) over the demo's data, the way a person uses
them: ``labeldp demo --keep-running``, sign in with each tenant's key, walk every page, plan and
create a release and deliver it, join it, watch a training job finish, download the model, predict
a few IDs — under the pages' strict CSP (any violation, script error or console error fails the
test), with axe-core finding no serious accessibility violation and the keyboard reaching everything.
Screenshots of the main pages land in build/console-screenshots/ (LABELDP_CONSOLE_SCREENSHOTS)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.browser import (
    RECORD_VIOLATIONS,
    Demo,
    Watched,
    axe_violations,
    chromium_path,
    demo_keep_running,
    record_axe,
    screenshot,
    watch,
)

pytestmark = [pytest.mark.browser, pytest.mark.processes]

SERIOUS = ("serious", "critical")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    chromium_path()  # skip (or fail in CI) before the demo runs for nothing
    out = tmp_path_factory.mktemp("demo")
    with demo_keep_running(out) as running:
        yield running
    text = "".join(running.output)
    assert "stopping the services" in text and "both services stopped" in text, text[-2000:]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def open_page(browser: Any) -> Iterator[Any]:
    """A fresh browser context per page (its own sessionStorage), watched; checked clean at the end."""
    opened: list[tuple[Any, Watched]] = []

    def new(url: str) -> Watched:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        context.add_init_script(RECORD_VIOLATIONS)
        page = context.new_page()
        watched = watch(page)
        page.goto(url)
        opened.append((context, watched))
        return watched

    yield new
    for context, watched in opened:
        watched.check_clean()
        context.close()


def sign_in(w: Watched, key: str, landing: str) -> Any:
    page = w.page
    page.get_by_label("Tenant API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", level=1, name=landing).wait_for()
    return page


def go(page: Any, base: str, route: str, heading: str | re.Pattern[str]) -> None:
    page.goto(f"{base}/console/#/{route}")
    page.get_by_role("heading", level=1, name=heading).wait_for()


def api(base: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)


# What the focused control's ring (its box grown by outline-offset + outline-width) overlaps among its
# labels and the texts that describe it: a ring drawn over a label's text hides it.
RING_COVERS = """() => {
  const control = document.activeElement;
  const style = getComputedStyle(control);
  const reach = parseFloat(style.outlineOffset) + parseFloat(style.outlineWidth);
  const r = control.getBoundingClientRect();
  const described = (control.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
  const texts = [...control.labels, ...described.map((id) => document.getElementById(id)).filter(Boolean)];
  const covered = texts.filter((el) => {
    const b = el.getBoundingClientRect();
    const across = b.left < r.right + reach && b.right > r.left - reach;
    return across && b.top < r.bottom + reach && b.bottom > r.top - reach;
  });
  return { reach, texts: texts.length, covered: covered.map((el) => el.textContent.trim()) };
}"""


def assert_ring_clear(page: Any, control: Any) -> None:
    """Focused, the control's focus ring covers none of its label's or its help's text."""
    control.focus()
    found = page.evaluate(RING_COVERS)
    assert found["reach"] >= 3 and found["texts"] >= 1, found  # a ring was drawn, and there is a label
    assert found["covered"] == [], found


def spread_figure(page: Any, caption: str) -> dict[str, Any]:
    """A spend distribution's drawing as numbers: its x tick labels and positions, its bars' centres."""
    figure = page.locator("figure.chart-figure", has=page.locator("figcaption", has_text=caption))
    found: dict[str, Any] = figure.evaluate(
        """(fig) => {
          const at = (el, name) => Number(el.getAttribute(name));
          return {
            ticks: [...fig.querySelectorAll("g.x-ticks text")].map((t) => [t.textContent, at(t, "x")]),
            bars: [...fig.querySelectorAll("rect.mark")].map((r) => at(r, "x") + at(r, "width") / 2),
          };
        }"""
    )
    return found


def no_serious_violations(page: Any, where: str) -> list[dict[str, Any]]:
    found = axe_violations(page)
    record_axe(where, found)
    serious = [v for v in found if v["impact"] in SERIOUS]
    assert serious == [], (where, serious)
    return found


def test_sign_in_refuses_a_wrong_key_and_keeps_the_right_one_in_this_tab_only(
    demo: Demo, open_page: Any
) -> None:
    w = open_page(f"{demo.labels_url}/console")  # redirected to /console/
    page = w.page
    page.wait_for_url(re.compile(r"/console/$"))
    assert_ring_clear(page, page.get_by_label("Tenant API key"))  # its label stays readable
    page.get_by_label("Tenant API key").fill("ldp_not-a-key")
    page.get_by_role("button", name="Sign in").click()
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert "does not know that key" in alert.inner_text()
    assert page.evaluate("sessionStorage.length") == 0
    page = sign_in(w, demo.labels_key, "Datasets")
    assert page.evaluate("sessionStorage.getItem('labeldp.console.apiKey')") == demo.labels_key
    assert page.evaluate("localStorage.length") == 0 and page.evaluate("document.cookie") == ""
    assert page.context.cookies() == []  # nothing a cross-site request could ride on (no CSRF)
    assert demo.labels_key not in page.url
    page.reload()
    page.get_by_role("heading", level=1, name="Datasets").wait_for()  # the tab keeps its session
    page.get_by_role("button", name="Sign out").click()
    page.get_by_label("Tenant API key").wait_for()
    assert page.evaluate("sessionStorage.length") == 0
    # a new tab (a new session) starts signed out
    other = open_page(f"{demo.labels_url}/console/#/ledger").page
    other.get_by_label("Tenant API key").wait_for()


def test_the_pages_run_under_the_csp_which_the_browser_enforces(demo: Demo, open_page: Any) -> None:
    w = open_page(f"{demo.labels_url}/console/")
    page = sign_in(w, demo.labels_key, "Datasets")
    # what injected text would try — an HTML sink, code in a string, an inline handler — and loads from
    # elsewhere: each refused by the page's own CSP (nothing here reaches the network: CSP stops it first)
    refused = page.evaluate(
        """async () => {
            const out = [];
            const attempts = [
              () => document.body.insertAdjacentHTML("beforeend", "<img src=x onerror=window.__x=1>"),
              () => setTimeout("window.__x = 2", 0),
              () => document.createElement("button").setAttribute("onclick", "window.__x = 3"),
            ];
            for (const attempt of attempts) {
              try { attempt(); out.push("ran"); } catch (e) { out.push(e.name); }
            }
            try { await fetch("http://127.0.0.2:9/x"); out.push("fetched"); } catch (e) { out.push(e.name); }
            const image = new Image();
            image.src = "http://127.0.0.2:9/x.png";
            return out;
        }"""
    )
    page.wait_for_timeout(300)
    assert refused == ["TypeError"] * 4 and page.evaluate("window.__x") is None
    assert page.locator("body img").count() == 0
    assert [v["directive"] for v in w.violations()] == ["require-trusted-types-for"] * 3 + [
        "connect-src",
        "img-src",
    ]
    w.forget()  # provoked on purpose
    # no other site may frame the console (frame-ancestors 'none')
    framing = page.context.new_page()
    framing.set_content(f'<iframe src="{demo.labels_url}/console/"></iframe>')
    framing.wait_for_timeout(1000)
    assert framing.frames[1].url.startswith("chrome-error://")
    framing.close()


def test_api_text_is_shown_as_text(demo: Demo, open_page: Any) -> None:
    hostile = '<img src=x onerror="window.__pwned=1"><b>bold</b>'
    with api(demo.labels_url, demo.labels_key) as c:
        made = c.post("/v1/datasets", json={"name": hostile, "label_type": "count", "lo": 0, "hi": 5})
        assert made.status_code == 201, made.text
    try:
        w = open_page(f"{demo.labels_url}/console/")
        page = sign_in(w, demo.labels_key, "Datasets")
        page.get_by_role("link", name=hostile).wait_for()
        assert page.locator("main img").count() == 0 and page.locator("main b").count() == 0
        page.get_by_role("link", name=hostile).click()
        page.get_by_role("heading", level=1, name=hostile).wait_for()
        assert page.evaluate("window.__pwned") is None
    finally:
        with api(demo.labels_url, demo.labels_key) as c:
            assert c.delete(f"/v1/datasets/{made.json()['id']}").status_code == 204


def test_the_labels_console_shows_the_demo_from_the_public_api(demo: Demo, open_page: Any) -> None:
    with api(demo.labels_url, demo.labels_key) as c:
        (ds,) = [d for d in c.get("/v1/datasets").json()["items"] if d["name"].startswith("demo-")]
        (rel,) = c.get(f"/v1/datasets/{ds['id']}/releases").json()["items"]
        audit = c.get(f"/v1/releases/{rel['id']}/audit").json()
        budget = c.get(f"/v1/datasets/{ds['id']}/budget").json()
        operation = c.get("/openapi.json").json()["paths"]["/v1/datasets/{dataset_id}/budget"]["get"]
    (budget_bound,) = [p["schema"]["maximum"] for p in operation["parameters"] if p["name"] == "epsilon"]
    w = open_page(f"{demo.labels_url}/console/")
    page = sign_in(w, demo.labels_key, "Datasets")
    main = page.locator("main")
    assert f"{ds['label_count']:,}" in main.inner_text()
    screenshot(page, "labels-datasets")
    no_serious_violations(page, "datasets")

    page.get_by_role("link", name=ds["name"]).click()
    page.get_by_role("heading", level=2, name="Budget").wait_for()
    text = main.inner_text()
    assert f"{budget['examples']:,} of {budget['examples']:,}" in text  # every example can take ε = 1
    assert "version 1" in text and f"{ds['universe_count']:,} example IDs" in text
    asked = page.get_by_label("ε of one more release")  # GET …/budget?epsilon's bound, as declared
    assert float(asked.get_attribute("max") or "nan") == budget_bound
    figures = [f.inner_text() for f in page.locator("figure figcaption").all()]
    assert any("Per-example spend" in f for f in figures) and any("Per-user spend" in f for f in figures)
    # every example spent ε = 1: round ticks (0, 1, 2, … — never 1.25), the bar centred on the tick at 1
    spent = spread_figure(page, "Per-example spend")
    ticks = dict(spent["ticks"])
    assert list(ticks) == ["0", "1", "2", "3", "4"], spent
    assert spent["bars"] == [pytest.approx(ticks["1"])], spent
    for control in (asked, page.get_by_label("ε per user of one more user-level release")):
        assert_ring_clear(page, control)
    screenshot(page, "labels-dataset")
    no_serious_violations(page, "dataset")

    go(page, demo.labels_url, "releases", "Releases")
    page.get_by_role("link", name=rel["id"][:8]).click()
    page.get_by_role("heading", level=2, name="Audit").wait_for()
    page.get_by_text("ε lower bound (canary check, measured)", exact=False).first.wait_for()
    bins = page.get_by_role("table", name=re.compile(r"bins: what a label"))
    assert bins.locator("tbody tr").count() == len(rel["bins"])
    m = len(rel["bins"])
    assert page.locator("rect.heat").count() == m * m  # the transition, drawn
    assert page.get_by_role("img", name=re.compile("noisy prior over the 201 support points")).count() == 1
    deliveries = page.get_by_role("table", name=re.compile("of this release"))
    assert "delivered" in deliveries.inner_text()
    bound = audit["epsilon_lower_bound"]
    assert f"{bound['epsilon_low']:.4g}"[:5] in main.inner_text()
    assert bound["epsilon_low"] <= audit["max_multiplicative_advantage"]
    screenshot(page, "labels-release")
    no_serious_violations(page, "release")

    go(page, demo.labels_url, "ledger", "Ledger")
    entries = page.locator("ol.timeline li")
    assert entries.count() >= 2  # the initial budget, the demo's charge (then any a later test made)
    charge = entries.nth(1)
    assert f"charged ε 1 to {rel['examples']:,} examples" in charge.inner_text()
    # the charge's dataset by its name, linked; its ID only in the link's tooltip
    assert f"of dataset {ds['name']}" in charge.inner_text() and ds["id"] not in charge.inner_text()
    named = charge.get_by_role("link", name=ds["name"])
    assert named.get_attribute("title") == f"dataset {ds['id']}"
    assert named.get_attribute("href") == f"#/datasets/{ds['id']}"
    screenshot(page, "labels-ledger")
    no_serious_violations(page, "ledger")

    go(page, demo.labels_url, "parties", "Identity and recipients")
    assert "publisher" in page.get_by_role("table").inner_text()
    no_serious_violations(page, "parties")


def test_plan_preview_then_create_and_deliver_a_release(demo: Demo, open_page: Any) -> None:
    """On a dataset of its own (the demo's spec, 400 labels across its range): the other tests read the
    demo's dataset and ledger as the demo left them, and may run after this one on the same demo."""
    with api(demo.labels_url, demo.labels_key) as c:
        (shown,) = [d for d in c.get("/v1/datasets").json()["items"] if d["name"].startswith("demo-")]
        made = c.post("/v1/datasets", json={**shown["spec"], "name": f"plan-{shown['id'][:8]}"})
        assert made.status_code == 201, made.text
        ds = made.json()
        lo, hi = shown["spec"]["lo"], shown["spec"]["hi"]
        rows = "".join(f"plan-{i},{lo + (hi - lo) * i / 400:g}\n" for i in range(400))
        uploaded = c.put(
            f"/v1/datasets/{ds['id']}/labels",
            content=f"example_id,label\n{rows}".encode(),
            headers={"Content-Type": "text/csv"},
        )
        assert uploaded.status_code == 200, uploaded.text
        before = [e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]
        declared = c.get("/openapi.json").json()["components"]["schemas"]["ReleaseIn"]["properties"]
    least, most = declared["epsilon"]["anyOf"][0]["minimum"], declared["epsilon"]["anyOf"][0]["maximum"]
    w = open_page(f"{demo.labels_url}/console/#/datasets/{ds['id']}/plan")
    page = sign_in(w, demo.labels_key, f"Plan a release of {ds['name']}")
    assert page.get_by_label("ε per user").is_hidden()  # example-level: the user fields are hidden
    epsilon = page.get_by_label("ε per example")
    assert float(epsilon.get_attribute("min") or "nan") == least  # the API's bounds, from its document
    assert float(epsilon.get_attribute("max") or "nan") == most
    # a refusal shows the API's reason next to the field it is about, and lists it in the alert
    epsilon.fill(f"{most * 5:g}")
    page.get_by_role("button", name="Preview (free)").click()
    alert = page.get_by_role("alert")
    alert.wait_for()
    reason = f"Input should be less than or equal to {most:g}"
    assert "the request is not valid (422 invalid-request)" in alert.inner_text()
    assert f"ε per example: {reason}" in alert.inner_text()
    assert epsilon.get_attribute("aria-invalid") == "true"
    shown = page.locator(".field", has=epsilon).locator(".field-error")
    assert shown.inner_text() == reason
    assert shown.get_attribute("id") in (epsilon.get_attribute("aria-describedby") or "").split()
    screenshot(page, "labels-plan-refused")
    no_serious_violations(page, "plan refused")
    prior = page.get_by_label("ε₁ for the prior (optional)")
    epsilon.fill("0.5")  # the field's error goes as it is edited
    assert epsilon.get_attribute("aria-invalid") is None and shown.count() == 0
    prior.fill("0.5")  # a domain refusal (ε₁ not below ε) names its field too
    page.get_by_role("button", name="Preview (free)").click()
    at_prior = page.locator(".field", has=prior).locator(".field-error")
    at_prior.wait_for()
    assert "epsilon_prior must be < epsilon" in at_prior.inner_text() and prior.get_attribute("aria-invalid")
    prior.fill("")
    # τ as a number: the API calls it contribution_bound, and the number's input shows its first reason
    page.get_by_label("each user (all of a user's examples)").check()
    bound = page.get_by_label("contribution bound τ")
    bound.select_option("number")
    tau = page.get_by_label("τ (when a number)")
    tau.fill("0")
    page.get_by_role("button", name="Preview (free)").click()
    at_tau = page.locator(".field", has=tau).locator(".field-error")
    at_tau.wait_for()
    assert tau.get_attribute("aria-invalid") == "true" and at_tau.count() == 1
    assert bound.get_attribute("aria-invalid") is None
    tau.fill("3")
    bound.select_option("auto")
    page.get_by_label("each example", exact=True).check()
    page.get_by_role("button", name="Preview (free)").click()
    page.get_by_role("heading", level=2, name="Create").wait_for()
    text = page.locator("main").inner_text()
    assert "left for it after one more release at ε = 0.5\n2.5" in text  # budget 3, nothing spent
    assert "worst-case additive advantage" in text
    assert "expected variance (squared error)" in text and "\noutputs\n" in text  # the default: unbiased
    screenshot(page, "labels-plan")
    no_serious_violations(page, "plan")
    with api(demo.labels_url, demo.labels_key) as c:
        assert [e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"] == before  # free

    page.get_by_label("ε per example").fill("0.6")  # a change withdraws the preview
    assert page.get_by_role("button", name=re.compile("Create the release")).count() == 0
    page.get_by_label("ε per example").fill("0.5")
    page.get_by_role("button", name="Preview (free)").click()
    key = page.locator("main dd code").last.inner_text()
    assert key.startswith("console-")
    page.get_by_role("button", name=re.compile("Create the release")).click()
    page.get_by_role("heading", level=1, name=re.compile("^Release ")).wait_for()
    release_id = page.url.rsplit("/", 1)[-1]
    with api(demo.labels_url, demo.labels_key) as c:
        rel = c.get(f"/v1/releases/{release_id}").json()
        assert rel["status"] == "complete" and rel["epsilon"] == 0.5 and rel["dataset_id"] == ds["id"]
        charges = [e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]
        assert len(charges) == len(before) + 1 and charges[-1]["release_id"] == release_id
        replay = c.post(
            f"/v1/datasets/{ds['id']}/releases",
            json={"privacy_unit": "example", "recipient": "publisher", "loss": "squared", "epsilon": 0.5},
            headers={"Idempotency-Key": key},
        )
        assert replay.status_code == 200 and replay.json()["id"] == release_id  # the key was the console's

    page.get_by_role("button", name="Deliver to publisher").click()
    page.get_by_text("Delivered:").wait_for()
    assert "delivered" in page.get_by_role("table", name=re.compile("delivery of this release")).inner_text()
    with api(demo.features_url, demo.features_key) as f:
        assert release_id in [r["release_id"] for r in f.get("/v1/releases").json()["items"]]


def test_the_features_console_joins_trains_downloads_and_predicts(
    demo: Demo, open_page: Any, tmp_path: Path
) -> None:
    # the demo's release (its examples have feature rows; the plan test's, if it ran, has none)
    with api(demo.labels_url, demo.labels_key) as c:
        (ds,) = [d for d in c.get("/v1/datasets").json()["items"] if d["name"].startswith("demo-")]
        demo_release = c.get(f"/v1/datasets/{ds['id']}/releases").json()["items"][0]["id"]
    with api(demo.features_url, demo.features_key) as f:
        received = f.get("/v1/releases").json()["items"]
        table = f.get("/v1/feature-tables").json()["items"][0]["name"]
        (chosen,) = [r for r in received if r["release_id"] == demo_release]
        release_id = chosen["release_id"]
        join = f.post("/v1/joins", json={"release_id": release_id, "feature_table": table}).json()
    w = open_page(f"{demo.features_url}/console/")
    page = sign_in(w, demo.features_key, "Received releases")
    assert page.get_by_role("table").locator("tbody tr").count() == len(received)
    screenshot(page, "features-releases")
    no_serious_violations(page, "received releases")

    page.get_by_role("link", name=release_id[:8]).click()
    page.get_by_text("Signature verified: signed by advertiser").wait_for()
    if chosen["mechanism"]["kind"] == "unbiased":  # the default at the demo's ε and support
        page.get_by_text("unbiased randomizer (regression: the released value").wait_for()
        assert page.get_by_role("table", name=re.compile("outputs and the probability each has")).count() == 1
    else:
        assert page.locator("rect.heat").count() > 0
    screenshot(page, "features-release")
    no_serious_violations(page, "received release")

    page.get_by_role("link", name="Join it to a feature table").click()
    page.get_by_role("heading", level=1, name="Joins").wait_for()
    assert page.get_by_label("received release").input_value() == release_id
    page.get_by_role("button", name="Join").click()
    page.get_by_role("heading", level=2, name="Match").wait_for()
    assert f"{join['release_match_rate']:.1%}" in page.locator("main").inner_text()
    screenshot(page, "features-join")
    no_serious_violations(page, "join")

    go(page, demo.features_url, f"training?release={release_id}", "Training")
    page.get_by_role("button", name="Start training").click()
    page.get_by_role("heading", level=1, name=re.compile("^Training job ")).wait_for()
    job_id = page.url.rsplit("/", 1)[-1]
    bar = page.locator("progress")
    seen: set[str] = set()
    for _ in range(600):  # watch it run: the bar moves until the job succeeds
        seen.add(bar.get_attribute("value") or "")
        if page.get_by_text("Trained.").count():
            break
        page.wait_for_timeout(100)
    page.get_by_text("Trained.").wait_for()
    assert bar.get_attribute("value") == bar.get_attribute("max")  # done: the bar is full
    # 200 iterations, or fewer when it stopped early on held-out rows (an unbiased release's targets)
    unbiased = chosen["mechanism"]["kind"] == "unbiased"
    assert int(bar.get_attribute("max") or "0") <= 200 if unbiased else bar.get_attribute("max") == "200"
    assert len(seen) >= 2  # it was seen in progress, not only done
    screenshot(page, "features-job")
    no_serious_violations(page, "job")

    page.get_by_role("link", name=re.compile("See the model")).click()
    page.get_by_role("heading", level=2, name="Validation metrics").wait_for()
    with api(demo.features_url, demo.features_key) as f:
        model = f.get(f"/v1/models/{job_id}").json()
        artifact = f.get(f"/v1/models/{job_id}/artifact").content
    assert f"{model['metrics']['validation_examples']:,}" in page.locator("main").inner_text()
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the model (.skops)").click()
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    assert saved.name == f"model-{job_id}.skops" and saved.read_bytes() == artifact
    ids = [f"{demo.run_id}-click-{i:07d}" for i in (0, 5, 10)]  # held-out test clicks: features only
    page.get_by_label("example IDs (one per line)").fill("\n".join(ids))
    page.get_by_role("button", name="Predict").click()
    rows = page.get_by_role("table", name="3 predictions").locator("tbody tr")
    rows.first.wait_for()
    with api(demo.features_url, demo.features_key) as f:
        expected = f.post(f"/v1/models/{job_id}/predictions", json={"example_ids": ids}).json()["predictions"]
    shown = [float(rows.nth(i).locator("td").inner_text().replace(",", "")) for i in range(3)]
    assert [r.locator("th").inner_text() for r in rows.all()] == ids
    assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(shown, expected, strict=True))
    screenshot(page, "features-model")
    no_serious_violations(page, "model")
    asked = page.get_by_label("example IDs (one per line)")
    asked.fill("nope-1\nnope-2")  # IDs the table lacks are named at the field
    page.get_by_role("button", name="Predict").click()
    at_ids = page.locator(".field", has=asked).locator(".field-error")
    at_ids.wait_for()
    assert (
        at_ids.inner_text() == "not found: nope-1, nope-2" and asked.get_attribute("aria-invalid") == "true"
    )
    assert "2 example_ids are not in feature table" in page.get_by_role("alert").inner_text()

    for route, heading in (
        ("tables", "Feature tables"),
        ("models", "Models"),
        ("training", "Training"),
        ("semi-sensitive-models", "Received models"),
        ("senders", "Senders"),
    ):
        go(page, demo.features_url, route, heading)
        no_serious_violations(page, route)
    assert "advertiser" in page.get_by_role("table").inner_text()


# Counts the views rendered into <main> (each render first shows "Loading…").
COUNT_RENDERS = """() => {
  window.renders = 0;
  new MutationObserver((changes) => {
    for (const change of changes)
      for (const node of change.addedNodes) if (node.classList?.contains("loading")) window.renders += 1;
  }).observe(document.getElementById("main"), { childList: true });
}"""


def test_everything_is_reachable_by_keyboard(demo: Demo, open_page: Any) -> None:
    w = open_page(f"{demo.labels_url}/console/")
    w.page.get_by_label("Tenant API key").wait_for()
    w.page.evaluate(COUNT_RENDERS)
    page = sign_in(w, demo.labels_key, "Datasets")
    page.wait_for_load_state("networkidle")
    # Signing in renders the home page once: a second render would take the focus off its heading.
    assert page.evaluate("window.renders") == 1
    assert page.evaluate("document.activeElement.tagName") == "H1"  # signed in: the page's heading
    page.reload()  # a page as loaded: the first Tab reaches the skip link
    page.get_by_role("heading", level=1, name="Datasets").wait_for()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    page.reload()
    page.get_by_role("heading", level=1, name="Datasets").wait_for()
    focused: list[str] = []
    for _ in range(6):  # the skip link, the navigation in order, signing out
        page.keyboard.press("Tab")
        focused.append(page.evaluate("document.activeElement.textContent"))
    assert focused == [
        "Skip to content",
        "Datasets",
        "Releases",
        "Ledger",
        "Identity and recipients",
        "Sign out",
    ], focused
    for _ in range(2):
        page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.activeElement.textContent") == "Ledger"
    page.keyboard.press("Enter")
    page.get_by_role("heading", level=1, name="Ledger").wait_for()
    # after navigating, focus moves to the new page's heading (a screen reader starts there)
    page.wait_for_function("document.activeElement && document.activeElement.tagName === 'H1'")
    assert page.get_by_role("link", name="Ledger").get_attribute("aria-current") == "page"
    # every control a focus ring is drawn for: an outline of at least 2px
    page.keyboard.press("Tab")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineWidth")
    assert float(outline.removesuffix("px")) >= 2
