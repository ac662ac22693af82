"""The inspection pipeline on its real stack (systems.inspection.stack): PostgreSQL, RabbitMQ and Toxiproxy, the web
nodes, workers and IS nodes as OS processes. The fixed variant survives a worker killed -9 (P4: V1-V27 held, its
slots taken over within the RTO); the seed-faithful variant lets a zombie's batch land under a superseded epoch
(P6: V23) and never takes a silent worker to DEAD (V25). One stack for the module; each run waits on the pipeline
settling (a condition), not on a sleep. Nightly: a few minutes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reference.inspection.bugs import SEED_DEFECTS
from scenarios.catalogue import load_catalogue
from stack.postgres import find_pg_bin
from stack.rabbitmq import rabbitmq_available

pytestmark = [pytest.mark.stack, pytest.mark.whole_stack, pytest.mark.nightly]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    if find_pg_bin() is None:
        pytest.skip("PostgreSQL server binaries not installed (scripts/system-deps.sh installs them)")
    if not rabbitmq_available():
        pytest.skip("RabbitMQ is not installed: apt-get install -y --no-install-recommends rabbitmq-server "
                    "(or bash scripts/system-deps.sh as root)")
    from systems.inspection.stack import InspectionStack

    with InspectionStack(Path(tmp_path_factory.mktemp("inspection-stack"))) as s:
        yield s


def _run(stack: object, scenario_id: str, bugs: tuple[str, ...] = ()) -> object:
    from systems.inspection.stack import InspectionScenarioRunner

    return InspectionScenarioRunner(stack, bugs=bugs).run(load_catalogue("inspection")[scenario_id], 1)  # type: ignore[arg-type]


def test_a_worker_killed_loses_nothing_and_its_slots_come_back_in_time(stack: object) -> None:
    result = _run(stack, "P4")
    violated = [v.invariant for v in result.verdicts if v.status == "violated"]  # type: ignore[attr-defined]
    assert result.passed, (violated, result.exercised, result.stats["notes"])  # type: ignore[attr-defined]


def test_the_seed_variant_lets_a_zombie_write_under_a_superseded_epoch(stack: object) -> None:
    result = _run(stack, "P6", SEED_DEFECTS)
    violated = {v.invariant for v in result.verdicts if v.status == "violated"}  # type: ignore[attr-defined]
    assert {"V23", "V25"} <= violated
