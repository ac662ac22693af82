"""The seeded fleet shared by the end-to-end tests of every provider (each module brings its ``native``)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from reference.copilot.runtime import Runtime
from systems.copilot.workload import seed_fleet


@pytest.fixture(scope="module")
def fleet(native: Any) -> Any:
    from test_end_to_end import SPEC

    engine = create_engine(native.endpoints.admin_database_url)
    fleet = Runtime(sessionmaker(engine, expire_on_commit=False)).transact(lambda tx: seed_fleet(tx, SPEC))
    engine.dispose()
    return fleet
