"""Text a caller or a tenant controls, as the extender's log shows it: one line, printable, short.

The log is plain text, one record a line (`extender.cli`): a newline, a carriage return or an ANSI
escape in a request's path or an object's name would write lines of the caller's making.
"""

from __future__ import annotations

import logging
from typing import TextIO

from config.untrusted import printable

MAX_SHOWN = 300
MAX_LINE = 8_000  # a record's message at most: a recovery report's line, not a tenant's 256 KiB


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """`value` as a log line may carry it: control characters escaped, at most `limit` characters."""
    return printable(str(value), limit)


class OneLineFormatter(logging.Formatter):
    """Every record's message on one line of printable text, whatever it interpolated: a name, a
    path or an error text a tenant or a caller wrote can neither start a line of its own nor send an
    escape to a terminal, at whichever call site it was logged. A traceback keeps its lines: it is
    the extender's own text."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = printable(record.message, MAX_LINE)
        return super().formatMessage(record)


def configure(level: str, stream: TextIO) -> None:
    """The extender's log: plain text, one record a line, every message through `OneLineFormatter`."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
