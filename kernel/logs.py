"""What the systems' worker loops say when a round fails and they carry on (both systems' cores use it)."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

# What only a defect in the code raises: never an outage, a conflict or bad input, which have their own types (a
# database error, StaleWrite, DomainError, a platform error). Worker loops carry on after any failure, and a reconciler
# or a redelivery may repair what the failure left: without a record of these, a crash in the code passes unseen.
DEFECTS: tuple[type[BaseException], ...] = (TypeError, AttributeError, NameError, KeyError, IndexError,
                                            AssertionError, ZeroDivisionError, RecursionError, NotImplementedError)
DEFECT_NAMES = frozenset(t.__name__ for t in DEFECTS) | {"UnboundLocalError"}


# Every log record of a defect a loop carried on from says this right before the error (one_line): the simulation
# sees such records through a logging handler, the real stack's harness by reading the processes' logs.
DEFECT_MARK = "with a defect: "
# How the API and the stream tier log (a worker logs its role where this has the logger's name): the format _RECORD
# reads. Without it the API's records went to Python's last-resort handler, bare messages no harness could date.
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
# A record line of the components' logs: "%(asctime)s <name> %(levelname)s %(message)s", the name a worker's role
# (reference.copilot.worker) or the logger's name (the API, the stream tier).
_RECORD = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) (\S+) ([A-Z]+) (.*)$")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')


def defects_in_log(text: str) -> list[dict[str, Any]]:
    """The defect records in a component's log text: epoch time, the logging process, the error (``one_line``) and
    where it was raised (the innermost frame of the traceback that follows the record, when there is one)."""
    found: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None  # the defect record whose traceback lines follow, if the last record is one
    for line in text.splitlines():
        record = _RECORD.match(line)
        if record is not None:
            stamp, ms, role, _level, message = record.groups()
            error = message.partition(DEFECT_MARK)[2]
            current = None
            if error and error.partition(":")[0] in DEFECT_NAMES:
                at = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000  # asctime: local time
                current = {"at": at, "logger": role, "error": error[:300], "where": ""}
                found.append(current)
        elif current is not None and (frame := _FRAME.match(line)):
            path, lineno, fn = frame.groups()
            current["where"] = f"{path.rpartition('/')[2]}:{lineno} {fn}"
    return found


def is_defect(exc: BaseException) -> bool:
    return isinstance(exc, DEFECTS)


def one_line(exc: BaseException) -> str:
    """An exception as one log line: its type and its message's first line (a database error's message goes on with
    the statement and its parameters, over several lines)."""
    return f"{type(exc).__name__}: {str(exc).partition(chr(10))[0]}"


class FailedRounds:
    """The failures in a row of one repeated round (a poll, a period), told to ``log``: a WARNING at the 1st, 2nd,
    4th, 8th... failure and an INFO when a round succeeds again. A loop polling every second through an hour's
    outage writes a dozen lines, not 3,600, and the log still says when it began, that it went on, and when it
    ended."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self.log, self.what, self.failures = log, what, 0

    def failed(self, exc: BaseException) -> None:
        self.failures += 1
        if is_defect(exc):  # every time, with its traceback: a defect is not an outage going on
            self.log.error("%s failed %s%s", self.what, DEFECT_MARK, one_line(exc), exc_info=exc)
        elif self.failures & (self.failures - 1) == 0:  # a power of two
            self.log.warning("%s failed (%d in a row): %s", self.what, self.failures, one_line(exc))

    def succeeded(self) -> None:
        if self.failures:
            self.log.info("%s succeeded again after %d failure(s) in a row", self.what, self.failures)
            self.failures = 0
