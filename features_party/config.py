"""Features-party configuration: one pydantic-settings object, from ``LABELDP_FEATURES_*`` variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from features_party.storage.data_dir import DataDir
from labeldp.common.db import sqlite_url


class FeaturesSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LABELDP_FEATURES_", extra="ignore")

    party_id: str = Field("publisher", description="this party's id; releases must be addressed to it")
    data_dir: Path = Field(
        Path("labeldp-data/features"), description="received releases and the SQLite database"
    )
    database_url: str | None = Field(None, description="SQLAlchemy URL; default: SQLite under data_dir")
    identity_key: Path | None = Field(
        None, description="Ed25519 key (PEM); default data_dir/identity.pem, created"
    )
    host: str = Field("127.0.0.1", description="address the REST API binds")
    port: int = Field(8500, description="port of the REST API")
    grpc_host: str = Field("127.0.0.1", description="address the gRPC receiver binds")
    grpc_port: int = Field(8501, description="port of the gRPC receiver")
    workers: int = Field(
        1, ge=1, le=64, description="server processes `labeldp features serve` runs (REST and gRPC each)"
    )
    tls_cert: Path | None = Field(None, description="server certificate (PEM); with tls_key and tls_ca: mTLS")
    tls_key: Path | None = Field(None, description="server private key (PEM)")
    tls_ca: Path | None = Field(None, description="CA that signs the senders' client certificates")
    allow_plaintext: bool = Field(False, description="serve gRPC without TLS (local development only)")
    max_release_bytes: int = Field(4 * 2**30, description="largest accepted release on the wire")
    max_upload_bytes: int = Field(
        4 * 2**30,
        gt=0,
        description="largest accepted feature-table upload body; what an upload may decode to is 4 times "
        "its body + 64 MiB (a Parquet file's footer and page headers are read first, 413 table-too-large)",
    )
    grpc_workers: int = Field(
        32,
        ge=2,
        le=1024,
        description="threads that verify, spool, decode and store what the gRPC receiver's streams send "
        "(a stream waiting for its sender holds none)",
    )
    grpc_max_streams: int = Field(
        1024, ge=16, le=100_000, description="gRPC streams the receiver keeps open at once (more: refused)"
    )
    grpc_streams_per_peer: int = Field(
        16,
        ge=1,
        le=10_000,
        description="streams one peer (client certificate and address) may hold before their signed "
        "header is verified (more: RESOURCE_EXHAUSTED)",
    )
    grpc_streams_per_tenant: int = Field(
        8,
        ge=1,
        le=10_000,
        description="releases arriving at once for one tenant, once their header is verified (more: "
        "RESOURCE_EXHAUSTED)",
    )
    stream_header_seconds: float = Field(
        30.0, gt=0, description="a stream's signed header (or model message) must arrive within this long"
    )
    stream_idle_seconds: float = Field(
        60.0, gt=0, description="a delivery stream sending nothing this long is cut (DEADLINE_EXCEEDED)"
    )
    instance_name: str | None = Field(None, description="this process's host name in ownership tokens")
    training_lease_seconds: float = Field(
        60.0, gt=0, description="how long a training job's owner is trusted without a heartbeat"
    )
    max_queued_jobs_per_tenant: int = Field(
        8,
        ge=1,
        le=10_000,
        description="training jobs one tenant may have waiting in this process (the running one aside); "
        "one more answers 429 too-many-jobs with Retry-After. Tenants are served in turn",
    )
    max_concurrent_exports: int = Field(
        2,
        ge=1,
        le=64,
        description="training-set and released-value exports this process streams at once (each holds "
        "a partition of its join, up to ~200 MiB); one more answers 429 too-many-exports with Retry-After",
    )
    superseded_grace_seconds: float = Field(
        3600.0,
        ge=0,
        description="a feature table's superseded version is deleted once superseded this long (and "
        "no queued or running training job reads it); a version file no committed upload names, once "
        "older than this and 5 minutes",
    )
    log_level: str = Field("info", description="debug, info, warning or error")
    dask_scheduler: str | None = Field(
        None,
        description="train `lightgbm` models and count joins from 20M rows on a Dask cluster: "
        "tcp://host:port (its workers must see data_dir at the same path) or 'local' (a LocalCluster "
        "of worker processes); default: none",
    )

    @field_validator("dask_scheduler")
    @classmethod
    def _unset_when_empty(cls, value: str | None) -> str | None:
        return value or None  # compose passes an unset variable as ""

    def resolved_database_url(self) -> str:
        return self.database_url or sqlite_url(self.data_dir, "features.db")

    def identity_path(self) -> Path:
        return self.identity_key or self.paths().identity

    def paths(self) -> DataDir:
        """Every path under ``data_dir`` (``storage/data_dir.py``)."""
        return DataDir(self.data_dir)
