"""A pod read before a reload is read again after one that changes what its request is made with
(a namespace's VC, the TTL, the cluster's GPU count). Its cached request was once reused as long as
its spec text was the same: a gang reserved after the TTL went from 300 to 60 s got 300, and a
namespace the reload moved to another VC kept asking the old one."""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.gangs.podspec import PodRequest
from extender.http import wire
from tests.extender.helpers import Clock, args, pod, run, spec
from tests.extender.watched import EXAMPLE, watched


@pytest.mark.parametrize("lands", ["after the read", "during the read"])
def test_a_gang_reserved_after_a_reload_gets_the_new_ttl_even_if_its_pod_was_read_before(
    tmp_path: Path, lands: str
) -> None:
    """`during the read`: the read awaits outside the lock (a Framework or pod lookup), and a request
    made with the old config must not be cached as if read under the new one."""

    async def go() -> None:
        s, watcher, path = watched(tmp_path, ttl_seconds=300.0)
        clock = s.clock
        assert isinstance(clock, Clock)
        filler = [pod(f"f{i}", f"fill-{i}", "nlp", spec("nlp", 8, 3, "nlp/fill")) for i in range(3)]
        assert (await s.filter(args(filler[0])))["NodeNames"]  # nlp's 3 nodes reserved
        late = pod("l0", "late-0", "nlp", spec("nlp", 8, 2, "nlp/late"))

        async def reload() -> None:
            path.write_text(EXAMPLE.replace("reservationTtlSeconds: 300", "reservationTtlSeconds: 60"))
            assert await watcher.check() == "applied"

        read = s.request_of

        async def read_then_reload(p: wire.WirePod) -> PodRequest:
            got = await read(p)  # read with the TTL of 300 s, and the reload lands before the lock
            await reload()
            return got

        if lands == "during the read":
            s.request_of = read_then_reload  # type: ignore[method-assign,assignment]
        assert not (await s.filter(args(late)))["NodeNames"]  # waits: nlp is full
        s.request_of = read  # type: ignore[method-assign]
        if lands == "after the read":
            await reload()
        assert s.ttl_seconds == 60.0
        await s.pod_gone("f0")  # the filler's only known pod goes: its reservation with it
        assert s.core.gang("nlp/fill") is None
        clock.t += 1
        now = clock()
        assert (await s.filter(args(late)))["NodeNames"]
        g = s.core.gang("nlp/late")
        assert g is not None
        assert g.deadline == now + 60.0, f"deadline now+{(g.deadline or 0) - now:g}"

    run(go())


def test_a_namespace_moved_to_another_vc_by_a_reload_asks_the_new_vc(tmp_path: Path) -> None:
    async def go() -> None:
        base = EXAMPLE
        s, watcher, path = watched(tmp_path)
        # names no VC: its namespace's (nlp); 4 nodes, more than nlp's 3: waits
        p = pod(
            "u0",
            "big-0",
            "nlp",
            '{"leafCellNumber": 8, "affinityGroup": {"name": "nlp/big", '
            '"members": [{"podNumber": 4, "leafCellNumber": 8}]}}',
        )
        assert not (await s.filter(args(p)))["NodeNames"]
        path.write_text(base.replace("    nlp: nlp\n", "    nlp: vision\n", 1))
        assert await watcher.check() == "applied"
        await s.filter(args(p))
        cached = s.cached("u0")
        assert cached is not None and cached.request.vc == "vision"

    run(go())
