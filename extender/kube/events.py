"""Kubernetes Events: why a pod waits, what happened to its gang, what became of a config change.

`kubectl describe pod` is where a tenant looks first, so the structured wait reason goes there. A
pod is filtered again every backoff period (1-10 s) with, mostly, the same reason; writing each one
would flood the API server. So the same (object, reason, message) is written at most once per
`repeat_seconds`, a token bucket per namespace caps what one namespace's pods can be told (one team's
thousand waiting pods cannot use up the budget every other team's Events share), and a token bucket
caps the total rate across namespaces; what is suppressed is counted in
`topogang_events{result="suppressed"}`. Writes are fire-and-forget: an Event is advice, never a
reason to fail or delay a verb.

Events are written only about pods the extender knows from the API server (the verbs act on its
copy, `extender.http.trusted`), and a message is made printable and cut at `MAX_MESSAGE` characters:
text a tenant wrote (a gang's name) is quoted by whoever composes the message (`quoted`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from config.untrusted import printable
from extender.kube.client import ApiError, AsyncKube, NoAnswerError
from extender.ops.background import spawn
from extender.ops.metrics import Metrics

log = logging.getLogger("topogang.kube")

REPEAT_SECONDS = 60.0
RATE_PER_SECOND = 20.0
BURST = 100.0
MAX_REMEMBERED = 50_000
NS_RATE_PER_SECOND = 2.0  # one namespace's share: a burst of 20, then 2 a second
NS_BURST = 20.0
MAX_MESSAGE = 512


def quoted(text: str, limit: int = 120) -> str:
    """Text a tenant controls, as an Event shows it: in quotes, printable, cut short."""
    return '"' + printable(text, limit).replace('"', '\\"') + '"'


@dataclass(frozen=True, slots=True)
class ObjectRef:
    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = "v1"


def event_body(
    ref: ObjectRef, reason: str, message: str, *, kind: str, when: datetime, instance: str
) -> dict[str, Any]:
    """A core/v1 Event, the shape `kubectl describe` shows under Events."""
    stamp = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    involved: dict[str, Any] = {
        "apiVersion": ref.api_version,
        "kind": ref.kind,
        "name": ref.name,
        "namespace": ref.namespace,
    }
    if ref.uid:
        involved["uid"] = ref.uid
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{ref.name}.", "namespace": ref.namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": printable(message, MAX_MESSAGE),
        "type": kind,
        "source": {"component": "topogang"},
        "reportingComponent": "topogang",
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventRecorder:
    """Deduplicated, rate-limited Event writes."""

    def __init__(
        self,
        kube: AsyncKube,
        metrics: Metrics,
        *,
        clock: Callable[[], float],
        instance: str,
        repeat_seconds: float = REPEAT_SECONDS,
        rate: float = RATE_PER_SECOND,
        burst: float = BURST,
        ns_rate: float = NS_RATE_PER_SECOND,
        ns_burst: float = NS_BURST,
    ) -> None:
        self.kube = kube
        self.metrics = metrics
        self.clock = clock
        self.instance = instance
        self.repeat_seconds = repeat_seconds
        self.rate, self.burst = rate, burst
        self.tokens = burst
        self.filled_at = clock()
        self.ns_rate, self.ns_burst = ns_rate, ns_burst
        self.ns_tokens: dict[str, tuple[float, float]] = {}  # namespace -> (tokens, when filled)
        self.sent: dict[tuple[str, str, str, str], float] = {}  # (ns, name, reason, message) -> when

    def _admit(self, key: tuple[str, str, str, str]) -> bool:
        now = self.clock()
        last = self.sent.get(key)
        if last is not None and now - last < self.repeat_seconds:
            return False
        ns_tokens, ns_at = self.ns_tokens.get(key[0], (self.ns_burst, now))
        ns_tokens = min(self.ns_burst, ns_tokens + (now - ns_at) * self.ns_rate)
        self.tokens = min(self.burst, self.tokens + (now - self.filled_at) * self.rate)
        self.filled_at = now
        if ns_tokens < 1.0 or self.tokens < 1.0:
            self.ns_tokens[key[0]] = (ns_tokens, now)
            return False
        self.tokens -= 1.0
        self.ns_tokens[key[0]] = (ns_tokens - 1.0, now)
        if len(self.sent) >= MAX_REMEMBERED:
            self.forget()
        self.sent[key] = now
        return True

    def forget(self) -> None:
        """Drop what no longer suppresses anything (bounded memory under pod churn)."""
        now = self.clock()
        self.sent = {k: t for k, t in self.sent.items() if now - t < self.repeat_seconds}
        full = self.ns_burst / self.ns_rate if self.ns_rate > 0 else float("inf")
        self.ns_tokens = {ns: v for ns, v in self.ns_tokens.items() if now - v[1] < full}

    def record(self, ref: ObjectRef, reason: str, message: str, *, warning: bool = False) -> bool:
        """Queue an Event; False when it was suppressed as a repeat or by the rate limit."""
        if not self._admit((ref.namespace, ref.name, reason, message)):
            self.metrics.events.labels(reason, "suppressed").inc()
            return False
        body = event_body(
            ref,
            reason,
            message,
            kind="Warning" if warning else "Normal",
            when=datetime.now(UTC),
            instance=self.instance,
        )
        spawn(self._post(ref.namespace, body, reason))
        return True

    async def _post(self, namespace: str, body: Mapping[str, Any], reason: str) -> None:
        try:
            await self.kube.request(
                "POST", f"/api/v1/namespaces/{quote(namespace, safe='')}/events", body=body
            )
        except (ApiError, NoAnswerError) as err:
            self.metrics.events.labels(reason, "error").inc()
            log.debug("event %s not written: %s", reason, err)
        else:
            self.metrics.events.labels(reason, "written").inc()
