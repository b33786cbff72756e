"""The shipped monitoring (compose profile, Prometheus config, Grafana dashboard) queries only what the
services really export: every metric a dashboard panel names is scraped from both live parties, and
Prometheus scrapes the compose services on the ports they listen on."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
import yaml

from features_party.config import FeaturesSettings
from labels_party.storage.db import sqlite_url
from tests.support.servers import LabelsProcess, features_server_thread, tenant_key

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
METRIC = re.compile(r"\b((?:labeldp|process|python)_[a-z_]+)\b")
SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created")


def family(name: str) -> str:
    """A sample name's metric family (the text format's suffixes removed)."""
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def exported(base_url: str) -> set[str]:
    """Every family the service declares (``# TYPE`` lines: also those without a sample yet)."""
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    return {family(m) for m in re.findall(r"^# TYPE ([a-z_]+) ", text, flags=re.M)}


def test_the_dashboard_queries_only_exported_metrics(tmp_path: Path) -> None:
    dashboard = json.loads((MONITORING / "grafana" / "dashboards" / "labeldp.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 10
    wanted = {family(m) for e in exprs for m in METRIC.findall(e)}
    data = tmp_path / "labels"
    data.mkdir()
    url = sqlite_url(data)
    tenant_key(url, "acme", "1")
    labels = LabelsProcess(data, url, tmp_path / "labels.log")
    labels.start()
    try:
        have = exported(labels.base_url)
    finally:
        labels.stop()
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    with features_server_thread(settings) as base:
        have |= exported(base)
    assert wanted <= have, sorted(wanted - have)
    # every panel asks the provisioned data source, and the budget, releases and deliveries are shown
    assert {t["datasource"]["uid"] for p in dashboard["panels"] for t in p.get("targets", [])} == {
        "labeldp-prometheus"
    }
    assert {"labeldp_epsilon_charged", "labeldp_releases", "labeldp_deliveries"} <= wanted


def test_the_compose_profile_wires_prometheus_and_grafana() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"]  # `up` without the profile leaves them out
        for mount in services[name]["volumes"]:
            source = mount.split(":")[0]
            assert (ROOT / source).exists(), mount
    prometheus = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    targets = {t for job in prometheus["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    listening = {
        "labels-party": services["labels-party"]["environment"]["LABELDP_PORT"],
        "features-party": services["features-party"]["environment"]["LABELDP_FEATURES_PORT"],
    }
    assert targets == {f"{host}:{port}" for host, port in listening.items()}
    source = yaml.safe_load(
        (MONITORING / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )["datasources"][0]
    assert source["uid"] == "labeldp-prometheus" and source["url"] == "http://prometheus:9090"
    provider = yaml.safe_load(
        (MONITORING / "grafana" / "provisioning" / "dashboards" / "labeldp.yml").read_text()
    )["providers"][0]
    mounted = [v.split(":")[1] for v in services["grafana"]["volumes"] if "dashboards" in v.split(":")[0]]
    assert provider["options"]["path"] in mounted
