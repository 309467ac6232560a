"""Text a caller or a tenant controls, as the extender's log shows it: one line, printable, short.

The log is plain text, one record a line (`extender.cli`): a newline, a carriage return or an ANSI
escape in a request's path or an object's name would write lines of the caller's making.
"""

from __future__ import annotations

from config.untrusted import printable

MAX_SHOWN = 300


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """`value` as a log line may carry it: control characters escaped, at most `limit` characters."""
    return printable(str(value), limit)
