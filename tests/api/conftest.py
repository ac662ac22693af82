"""Fixtures for the Copilot API tests (helpers live in api_support.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from api_support import Api, build_api


@pytest.fixture
def api() -> Iterator[Api]:
    """A fresh in-memory database, seeded fleet and app per test."""
    a = build_api()
    yield a
    a.hub.close()
    a.engine.dispose()
