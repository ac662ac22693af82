"""What the systems' worker loops say when a round fails and they carry on (both systems' cores use it)."""

from __future__ import annotations


def one_line(exc: BaseException) -> str:
    """An exception as one log line: its type and its message's first line (a database error's message goes on with
    the statement and its parameters, over several lines)."""
    return f"{type(exc).__name__}: {str(exc).partition(chr(10))[0]}"
