"""Through the extender's own reload: a namespace whose running gang has a Succeeded member is not
held back by its bound after an unrelated config edit, and the gang's running pod is not evicted."""

from __future__ import annotations

from pathlib import Path

from extender.http.reload import ConfigWatcher
from extender.standalone import EXAMPLE_CONFIG
from tests.extender.helpers import Clock, bind_args, run
from tests.extender.test_entitlement import config, make
from tests.extender.test_vc_order import filtered, gang

LIMITED = "  tenants:\n    vision: {maxReservedGpus: 16}\n"


def test_a_reload_does_not_reopen_a_finished_members_slot(tmp_path: Path) -> None:
    async def go() -> None:
        path = tmp_path / "cluster.yaml"
        path.write_text(EXAMPLE_CONFIG.read_text(encoding="utf-8") + LIMITED, encoding="utf-8")
        s, evicted = make(config(LIMITED))
        clock = s.clock
        assert isinstance(clock, Clock)  # `make` gives the scheduler one: moved on below
        watcher = ConfigWatcher(s, path, clock=Clock())
        a = gang("a", 2, ns="vision", vc="vision")
        for p in a:
            passed, why = await filtered(s, p)
            assert passed, why
            assert await s.bind(bind_args(p, passed[0])) == {"Error": ""}
        await s.pod_gone(a[0]["metadata"]["uid"], finished=True)  # a-0 Succeeded, a-1 runs on
        path.write_text(path.read_text().replace("maxReservedGpus: 16", "maxReservedGpus: 17"))
        assert await watcher.check() == "applied"
        assert s.core.reservations.unclaimed_leaves("vision") == 0
        passed, why = await filtered(s, gang("b", 2, ns="vision", vc="vision")[0])
        assert passed, why  # 0 + 16 <= 17: not held back by a slot whose pod came and ran
        clock.t += 10_000
        assert [r.gang for r in await s.expire() if r.gang == "vision/a"] == []
        assert "vision-a-1" not in evicted

    run(go())
