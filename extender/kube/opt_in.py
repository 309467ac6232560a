"""`--adopt-unsigned-bind-info` is spent once, for good: it lets the first start of a switch-over
from HiveD adopt bind info topogang did not sign. Left on, without a durable record, it came back
at every start that listed no pod topogang had signed (a quiet cluster, a fail-over after the
signed pods finished): any tenant's pod bound with made-up bind info was then adopted into another
team's quota at any priority, or, bound to a node outside the config, made the start refuse the
config for everyone. The record is a GangReservation named `SPENT` in the extender's own
namespace, which only topogang's service account may write (the chart's Role), made once a start
with the opt-in is through (not refused for its config). Without the CRD the record cannot be
made, and the opt-in holds at every start as before, with a warning."""

from __future__ import annotations

import logging
from typing import Any

from extender.gangs import reservation_objects as rsv
from extender.kube.client import ApiError, AsyncKube

log = logging.getLogger("topogang.kube")

SPENT = "topogang-unsigned-bind-info-adopted"  # no gang's object name (those end in -<32 hex>)


def marker(namespace: str) -> dict[str, Any]:
    """The record, valid under the GangReservation CRD's schema and read back as no gang."""
    return {
        "apiVersion": f"{rsv.GROUP}/{rsv.VERSION}",
        "kind": "GangReservation",
        "metadata": {"name": SPENT, "namespace": namespace},
        "spec": {
            "gang": "",
            "virtualCluster": "",
            "priority": 0,
            "members": [],
            "ttlSeconds": 0,
            "slots": [],
        },
    }


class UnsignedOptIn:
    """Whether this start may adopt unsigned bind info, and the record once it has."""

    def __init__(
        self, kube: AsyncKube | None = None, namespace: str | None = None, wanted: bool = False
    ) -> None:
        self.kube, self.namespace, self.wanted = kube, namespace, wanted
        self.armed_now = False  # this start adopted with it: to record once the start is through

    async def armed(self) -> bool:
        """The admin's opt-in, unless an earlier start recorded it spent (an API error other than
        404 raises: the start is tried again, never taken as a first start)."""
        self.armed_now = False
        if not self.wanted or self.kube is None or self.namespace is None:
            return False
        self.armed_now = await self.kube.request("GET", rsv.object_path(self.namespace, SPENT)) is None
        return self.armed_now

    async def spend(self) -> None:
        """Record that the opt-in is spent, once a start that adopted with it is through."""
        if not self.armed_now or self.kube is None or self.namespace is None:
            return
        try:
            await self.kube.request("POST", rsv.collection_path(self.namespace), body=marker(self.namespace))
        except ApiError as err:
            if err.status != 409:  # 409: recorded already (another replica's start)
                log.warning("--adopt-unsigned-bind-info stays on: recording it spent failed: %s", err)
                return
        self.armed_now = False
        log.info("--adopt-unsigned-bind-info spent: later starts adopt only bind info topogang signed")
