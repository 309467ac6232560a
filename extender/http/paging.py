"""Kubernetes-style paging of long lists: `?limit=N` and the `continue` token of the previous page.

A list of every gang once built a 300 MB answer for 21,500 gangs, partly under the verbs' lock. A
page holds at most `limit` items (`DEFAULT_LIMIT` when the caller names none, at most `MAX_LIMIT`),
and `metadata.continue` (also at the top level as `continue`) names where the next page starts;
the last page has none. The token is the sort key of the last item looked at, so a page is built
in O(limit) whatever came and went since the previous one (like the API server's, a list read
across pages is not one snapshot: an item that appeared behind the token is not shown).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from config.untrusted import whole_number

DEFAULT_LIMIT = 500
MAX_LIMIT = 5000

Key = tuple[str, ...]


class PageError(ValueError):
    pass


@dataclass(frozen=True)
class Page:
    limit: int
    after: Key | None  # the sort key the page starts after; None: from the start


def parse(q: Mapping[str, str]) -> Page:
    """`limit` and `continue` from a query; `PageError` naming the parameter when either is bad."""
    raw = q.get("limit") or ""
    limit = DEFAULT_LIMIT
    if raw:
        asked = whole_number(raw)
        if asked is None or asked < 1:
            raise PageError(f"limit: {raw[:40]!r} is not a positive whole number")
        limit = min(asked, MAX_LIMIT)
    token = q.get("continue") or ""
    return Page(limit, decode(token) if token else None)


def encode(key: Key) -> str:
    return base64.urlsafe_b64encode(orjson.dumps({"v": 1, "after": list(key)})).decode()


def decode(token: str) -> Key:
    try:
        doc = orjson.loads(base64.urlsafe_b64decode(token.encode()))
        after = doc["after"]
        if doc.get("v") != 1 or not isinstance(after, list) or not all(isinstance(x, str) for x in after):
            raise ValueError
    except (ValueError, binascii.Error, KeyError, TypeError, orjson.JSONDecodeError):
        raise PageError("continue: not a token from this server's previous page") from None
    return tuple(after)
