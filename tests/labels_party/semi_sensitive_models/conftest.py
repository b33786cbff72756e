"""The ``party`` fixture of the semi-sensitive model tests (on SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.semi_sensitive_models import Party, labels_party_at


@pytest.fixture
def party(database_url: str, tmp_path: Path) -> Iterator[Party]:
    with labels_party_at(database_url, tmp_path) as p:
        yield p
