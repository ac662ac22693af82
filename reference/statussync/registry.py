"""The registries the service judges events by (§4.5-§4.7): versioned business statuses mapped to a lifecycle, and
operation definitions (who reports what, with which data schemas, under which failure policy). A task binds its
definition versions when it is created; an event is judged by those, never by a newer one.

The rows below are what a deployment seeds (``seed_rows``); a registry change mid-run adds a new version
(``next_version_rows``) that only tasks created afterwards use."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection, insert

from reference.statussync.models import (
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    OperationDefinition,
    StatusBase,
    StatusDefinition,
)

TENANT = "t1"
PRODUCT = "DOCUMENT"
TASK_TYPE = "DOCUMENT_PROCESS"
STATUS_VERSION = 3  # §4.5's example: DOCUMENT_PROCESS / v3
OPERATION_VERSION = 2
COORDINATOR = "task-coordinator"
RECONCILER = "health-reconciler"

STEP_EVENTS = ("STEP_STARTED", "STEP_PROGRESS", "STEP_COMPLETED", "STEP_FAILED")
TASK_EVENTS = ("TASK_COMPLETED", "TASK_FAILED")
# The step lifecycle an accepted step event leaves (§3.5's table); progress keeps the step running.
STEP_LIFECYCLE = {"STEP_STARTED": RUNNING, "STEP_PROGRESS": RUNNING, "STEP_COMPLETED": SUCCEEDED,
                  "STEP_FAILED": FAILED}
TASK_LIFECYCLE = {"TASK_COMPLETED": SUCCEEDED, "TASK_FAILED": FAILED}
# Legal lifecycle moves (§4.1, §4.2): a terminal status never moves in the same attempt.
LEGAL = {PENDING: {PENDING, RUNNING, SUCCEEDED, FAILED, "CANCELLED"},
         RUNNING: {RUNNING, SUCCEEDED, FAILED, "CANCELLED"}}

# code -> (lifecycle, terminal, allowed_from); §4.5's example statuses with the steps' stages of §3.4.
STATUSES_V3: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "QUEUED": (PENDING, False, ()),
    "PREPARING": (RUNNING, False, ("QUEUED", "PREPARING")),
    "PREPARED": (RUNNING, False, ("PREPARING",)),
    "PARSING": (RUNNING, False, ("PREPARED", "PARSING", "PARSE_RETRYING")),
    "PARSE_COMPLETED": (RUNNING, False, ("PARSING",)),
    "PARSE_FAILED": (RUNNING, False, ("PARSING",)),
    "PARSE_RETRYING": (RUNNING, False, ("PARSE_FAILED",)),
    "WAITING_REVIEW": (RUNNING, False, ()),
    "PUBLISHING": (RUNNING, False, ("PARSE_COMPLETED", "PUBLISHING")),
    "PUBLISHED": (RUNNING, False, ("PUBLISHING",)),
    "COMPLETED": (SUCCEEDED, True, ()),
    "REJECTED": (FAILED, True, ()),
}
# v4 (a registry change mid-run): a new review stage, and a failed parse is now PARSE_ERROR (PARSE_FAILED is gone).
# Tasks bound to v3 keep v3's statuses (§4.6); their producers report by the version in their execution context.
STATUSES_V4 = {**{code: v for code, v in STATUSES_V3.items() if code != "PARSE_FAILED"},
               "PARSE_ERROR": (RUNNING, False, ("PARSING",)), "REVIEWED": (RUNNING, False, ())}

# operation -> (producer, allowed event types, allowed data schemas by event type, failure policy)
OPERATIONS: dict[str, tuple[str, tuple[str, ...], dict[str, list[str]], str]] = {
    "FILE.PREPARE": ("file-worker", STEP_EVENTS, {"STEP_PROGRESS": ["file.prepare.progress.v1"],
                                                  "STEP_COMPLETED": ["file.prepare.completed.v1"]}, "FAIL_TASK"),
    "DOCUMENT.PARSE": ("document-parser", STEP_EVENTS, {"STEP_PROGRESS": ["document.parse.progress.v1"],
                                                        "STEP_COMPLETED": ["document.parse.completed.v2"]},
                       "RETRY_THEN_FAIL_TASK"),
    "RESULT.PERSIST": ("result-service", STEP_EVENTS, {"STEP_PROGRESS": ["result.persist.progress.v1"],
                                                       "STEP_COMPLETED": ["result.persist.completed.v1"]},
                       "FAIL_TASK"),
}
# The template's steps: (stepId, operationCode, the stage it reports while running, when done, when failed)
STEPS = (("01_prepare", "FILE.PREPARE", "PREPARING", "PREPARED", "PARSE_FAILED"),
         ("02_parse", "DOCUMENT.PARSE", "PARSING", "PARSE_COMPLETED", "PARSE_FAILED"),
         ("03_store", "RESULT.PERSIST", "PUBLISHING", "PUBLISHED", "PARSE_FAILED"))


def failed_status(step_failed: str, version: int) -> str:
    """The business status a failed step reports in the task's bound version (v4 renamed PARSE_FAILED)."""
    return "PARSE_ERROR" if version > STATUS_VERSION and step_failed == "PARSE_FAILED" else step_failed


def producer_of(operation: str) -> str:
    return OPERATIONS[operation][0]


def _status_rows(version: int, statuses: dict[str, tuple[str, bool, tuple[str, ...]]]) -> Iterator[dict[str, Any]]:
    for order, (code, (lifecycle, terminal, allowed_from)) in enumerate(statuses.items()):
        yield {"tenant_id": TENANT, "product": PRODUCT, "task_type": TASK_TYPE, "definition_version": version,
               "code": code, "display_name": code.replace("_", " ").title(), "lifecycle_status": lifecycle,
               "terminal": terminal, "severity": "ERROR" if lifecycle == FAILED else "INFO", "sort_order": order,
               "presentation": {"colorToken": "status." + code.lower()}, "allowed_from": list(allowed_from),
               "enabled": True}


def seed_rows() -> list[tuple[Any, list[dict[str, Any]]]]:
    """(table, rows) a deployment starts with: status definitions v3 and the operation definitions."""
    operations = [{"tenant_id": TENANT, "product": PRODUCT, "task_type": TASK_TYPE,
                   "definition_version": OPERATION_VERSION, "operation_code": code, "display_name": code.title(),
                   "producer_pattern": producer, "allowed_event_types": list(events),
                   "allowed_data_schemas": schemas, "failure_policy": policy, "enabled": True}
                  for code, (producer, events, schemas, policy) in OPERATIONS.items()]
    return [(StatusDefinition.__table__, list(_status_rows(STATUS_VERSION, STATUSES_V3))),
            (OperationDefinition.__table__, operations)]


def install(conn: Connection) -> None:
    """A deployment's database: the tables and the registry rows it starts with (the API's tests, the native stack)."""
    StatusBase.metadata.create_all(conn)
    for table, rows in seed_rows():
        conn.execute(insert(table), rows)


def next_version_rows() -> list[tuple[Any, list[dict[str, Any]]]]:
    """A registry change: status definitions v4 (tasks created from now on bind it)."""
    return [(StatusDefinition.__table__, list(_status_rows(STATUS_VERSION + 1, STATUSES_V4)))]


def statuses_of(version: int) -> dict[str, tuple[str, bool, tuple[str, ...]]]:
    """The registry as the harness's checkers read it (the same data the tables are seeded with)."""
    return {STATUS_VERSION: STATUSES_V3, STATUS_VERSION + 1: STATUSES_V4}[version]
