"""The soak's tenancy judge remembers what each running gang was given across restarts, even two
restarts with no check between them (a restart refused at the start for the cells on disk, then
confirmed and started again). It once rebuilt that memory from nothing at the second, and judged a
gang placed on VC nlp under rules that allowed it by the rules in force after them (hostile soak,
seed 16, `--cells`: 40 reports of a gang that never took nlp's quota)."""

from types import SimpleNamespace
from typing import cast

from tests.soak import tenants
from topology.core import Core


def _core(gid: int) -> Core:
    # what Core.adopt brought back at op 345: its cells no longer fit VC nlp (layout 4), kept
    # running opportunistic (priority -1, owner NO_OWNER); its request still names nlp at priority 0
    req = SimpleNamespace(vc="nlp", priority=0, promote_when_quota=False)
    gang = SimpleNamespace(id=gid, name="vision-lab/gang-22", priority=-1, request=req, slots=[])
    return cast(Core, SimpleNamespace(gangs=lambda: [gang]))


def test_given_survives_a_restart_refused_then_started_again() -> None:
    judge = tenants.Judge()
    judge.rules = 3  # vision-lab may use vision and nlp
    core = _core(10)
    assert judge.violations(core) == []  # placed under RULES[3]: first seen, rules 3, quota's 3
    judge.rules = 0  # the admin takes nlp away; the running gang keeps what it was given
    judge.renumbered()  # op_restart -> restart(): refused at the start (layout on disk)
    judge.renumbered()  # ... confirmed, restart() again: no check in between (service not ready)
    assert judge.violations(_core(7)) == []


def test_single_restart_still_carries() -> None:
    judge = tenants.Judge()
    judge.rules = 3
    assert judge.violations(_core(10)) == []
    judge.rules = 0
    judge.renumbered()
    assert judge.violations(_core(7)) == []
