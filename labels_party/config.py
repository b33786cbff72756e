"""Labels-party configuration: one pydantic-settings object, from ``LABELDP_*`` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from labels_party.storage.data_dir import DataDir
from labels_party.storage.db import sqlite_url


class LabelsSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LABELDP_", extra="ignore")

    data_dir: Path = Field(Path("labeldp-data/labels"), description="Parquet files and the SQLite database")
    database_url: str | None = Field(None, description="SQLAlchemy URL; default: SQLite under data_dir")
    host: str = Field("127.0.0.1", description="address `labeldp labels serve` binds")
    port: int = Field(8400, description="port `labeldp labels serve` binds")
    workers: int = Field(1, ge=1, le=64, description="server processes `labeldp labels serve` runs")
    file_workers: int = Field(
        2,
        ge=0,
        le=64,
        description="uploads each server process validates and merges at once, each in a process of its "
        "own, off the server's interpreter lock so that reads never wait for them (0: in the server's own "
        "threads)",
    )
    max_upload_bytes: int = Field(8 * 2**30, description="largest accepted label upload body")
    log_level: str = Field("info", description="debug, info, warning or error")
    party_id: str = Field("advertiser", description="this party's id, the sender id in every message")
    identity_key: Path | None = Field(
        None, description="Ed25519 key (PEM); default data_dir/identity.pem, created"
    )
    tls_cert: Path | None = Field(None, description="client certificate for mTLS to recipients (PEM)")
    tls_key: Path | None = Field(None, description="client private key (PEM)")
    allow_plaintext: bool = Field(False, description="deliver over gRPC without TLS (local development only)")
    release_ttl_seconds: int = Field(7 * 24 * 3600, description="how long a signed message stays deliverable")
    delivery_timeout_seconds: float = Field(300.0, description="deadline of one delivery attempt")
    delivery_attempts: int = Field(5, description="attempts on UNAVAILABLE / DEADLINE_EXCEEDED, with backoff")
    release_lease_seconds: float = Field(
        60.0, gt=0, description="how long a charged release's owner is trusted without a heartbeat"
    )
    instance_name: str | None = Field(None, description="this process's host name in ownership tokens")
    superseded_grace_seconds: float = Field(
        3600.0, ge=0, description="how long a superseded dataset version stays readable before it is deleted"
    )
    recipient_hosts: str | None = Field(
        None,
        description="comma-separated host names and networks (CIDR) recipients' grpc_address may use; "
        "default: any host except link-local addresses",
    )
    dask_scheduler: str | None = Field(
        None,
        description="count and randomize example-level regression releases on a Dask cluster: "
        "tcp://host:port (its workers must see data_dir at the same path) or 'local' (a LocalCluster "
        "of worker processes); default: in this process",
    )

    @field_validator("dask_scheduler")
    @classmethod
    def _unset_when_empty(cls, value: str | None) -> str | None:
        return value or None  # compose passes an unset variable as ""

    def resolved_database_url(self) -> str:
        return self.database_url or sqlite_url(self.data_dir)

    def paths(self) -> DataDir:
        """Every path under ``data_dir`` (``storage/data_dir.py``)."""
        return DataDir(self.data_dir)

    def identity_path(self) -> Path:
        return self.identity_key or self.paths().identity
