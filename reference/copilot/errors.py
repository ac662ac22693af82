"""Domain errors with stable codes. The HTTP shell turns them into application/problem+json."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A refusal the caller can act on. ``status`` is the HTTP status the API answers with."""

    status = 400

    def __init__(self, code: str, message: str, *, status: int | None = None, **detail: Any) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        if status is not None:
            self.status = status
        self.detail = detail


class ValidationFailed(DomainError):
    status = 422


class NotFound(DomainError):
    status = 404


class Forbidden(DomainError):
    status = 403


class Conflict(DomainError):
    status = 409


class Unauthenticated(DomainError):
    status = 401


class ServiceUnavailable(DomainError):
    """A dependency (database, broker) failed; nothing was written. Safe to retry with the same key."""

    status = 503


class StaleWrite(Exception):
    """A conditional update matched no row: the task moved on (status or version changed)."""

    def __init__(self, task_id: Any, expected_status: str, expected_version: int) -> None:
        super().__init__(f"task {task_id} is no longer {expected_status}@v{expected_version}")
        self.task_id = task_id
        self.expected_status = expected_status
        self.expected_version = expected_version


class RetryableError(Exception):
    """A handler failed in a way a later delivery may not: leave the message for redelivery."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
