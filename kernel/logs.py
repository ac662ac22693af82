"""What the systems' worker loops say when a round fails and they carry on (both systems' cores use it)."""

from __future__ import annotations

import logging


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
        if self.failures & (self.failures - 1) == 0:  # a power of two
            self.log.warning("%s failed (%d in a row): %s", self.what, self.failures, one_line(exc))

    def succeeded(self) -> None:
        if self.failures:
            self.log.info("%s succeeded again after %d failure(s) in a row", self.what, self.failures)
            self.failures = 0
