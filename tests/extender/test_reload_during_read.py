"""A reload that lands while a pod's request is being read (the read awaits outside the lock: a
Framework or pod lookup) must not leave that request, made with the old config, cached as if read
under the new one."""

from __future__ import annotations

from pathlib import Path

from extender.gangs.podspec import PodRequest
from extender.http import wire
from tests.extender.helpers import Clock, args, pod, run, spec
from tests.extender.watched import EXAMPLE, watched


def test_a_request_read_across_a_reload_is_not_kept_under_the_new_config(tmp_path: Path) -> None:
    async def go() -> None:
        s, watcher, path = watched(tmp_path, ttl_seconds=300.0)
        clock = s.clock
        assert isinstance(clock, Clock)
        filler = [pod(f"f{i}", f"fill-{i}", "nlp", spec("nlp", 8, 3, "nlp/fill")) for i in range(3)]
        assert (await s.filter(args(filler[0])))["NodeNames"]  # nlp's 3 nodes reserved
        late = pod("l0", "late-0", "nlp", spec("nlp", 8, 2, "nlp/late"))
        read = s.request_of

        async def read_then_reload(p: wire.WirePod) -> PodRequest:
            got = await read(p)  # read with the TTL of 300 s ...
            path.write_text(EXAMPLE.replace("reservationTtlSeconds: 300", "reservationTtlSeconds: 60"))
            assert await watcher.check() == "applied"  # ... and the reload lands before the lock
            return got

        s.request_of = read_then_reload  # type: ignore[method-assign,assignment]
        assert not (await s.filter(args(late)))["NodeNames"]  # waits: nlp is full
        s.request_of = read  # type: ignore[method-assign]
        assert s.ttl_seconds == 60.0
        await s.pod_gone("f0")
        assert s.core.gang("nlp/fill") is None
        clock.t += 1
        now = clock()
        assert (await s.filter(args(late)))["NodeNames"]
        g = s.core.gang("nlp/late")
        assert g is not None
        assert g.deadline == now + 60.0, f"deadline now+{(g.deadline or 0) - now:g}"

    run(go())
