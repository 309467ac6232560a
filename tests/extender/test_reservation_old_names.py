"""GangReservation objects written under the names before the hash was widened (12 hex, a 50-char
stem) are read back after an upgrade and rewritten under the new name, the old one deleted, nothing
lost."""

from __future__ import annotations

import hashlib
import re

from extender.gangs import reservation_objects as rsv
from tests.extender.helpers import Clock, run, spec
from tests.extender.test_kube_durable import COLLECTION, cluster, start, submit, until, where


def old_name(gang: str) -> str:
    digest = hashlib.sha256(gang.encode()).hexdigest()[:12]
    stem = re.sub(r"[^a-z0-9-]+", "-", gang.lower()).strip("-")[:50].strip("-")
    return f"{stem}-{digest}" if stem else f"gang-{digest}"


def test_old_named_object_is_renamed_after_upgrade() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        text = spec("vision", 8, 2, "vision/pair")
        submit(kube, "p0", "pair-0", "vision", text)
        r = await a.verb("filter", kube.server.list("/api/v1/namespaces/vision/pods")[0][0])
        assert r["NodeNames"], r
        before = where(a.s.core, "vision/pair")
        await a.stop()
        (obj,) = kube.server.list(COLLECTION)[0]
        # rename it as the previous version would have named it
        new = obj["metadata"]["name"]
        assert new == rsv.object_name("vision/pair")
        body = {
            **obj,
            "metadata": {"name": old_name("vision/pair"), "namespace": obj["metadata"]["namespace"]},
        }
        kube.server.handle("DELETE", f"{COLLECTION}/{new}", (), None)
        kube.server.handle("POST", COLLECTION, (), body)
        clock.t += 5
        b = await start(kube, clock)
        assert where(b.s.core, "vision/pair") == before
        await until(
            "renamed", lambda: [o["metadata"]["name"] for o in kube.server.list(COLLECTION)[0]] == [new]
        )
        (got,) = kube.server.list(COLLECTION)[0]
        assert got["spec"]["slots"] == obj["spec"]["slots"] and got["spec"]["gang"] == "vision/pair"
        await b.stop()

    run(go())
