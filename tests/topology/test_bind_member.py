"""A bind claims a slot only for a member asking what its gang asked.

After a restart a bind reads the pod's request afresh (its filter's is not remembered). A pod
filtered into an earlier placement of a gang name, at another priority, could then be bound into
the gang now placed under that name: the gang's pods disagreed, and the next restart brought the
gang back at the priority of whichever pod it read (found by the hostile soak's restart check,
seed 106: a gang placed at 1000 came back at 100).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.topology.fixtures import gang, rack_cluster
from topology.asks import MemberAsk
from topology.core import Core
from topology.decisions import GangPlacement, UserError
from topology.invariants import violations


def test_a_bind_whose_request_differs_from_its_gangs_is_refused_and_claims_nothing() -> None:
    core = Core(rack_cluster())
    req = gang("g", "a", (2, 8), priority=1000)
    placed = core.reserve(req, 0.0)
    assert isinstance(placed, GangPlacement)
    node = placed.pods[0].node
    for other in (replace(req, priority=100), replace(req, vc="b"), gang("g", "a", (3, 8), priority=1000)):
        with pytest.raises(UserError, match="different shape"):
            core.bind(MemberAsk(other, "u1", 8), node, 1.0)
        g = core.gang("g")
        assert g is not None and g.slot_of("u1") is None
    got = core.bind(MemberAsk(req, "u1", 8), node, 1.0)  # what the gang asked: claimed
    assert got is not None and got.bind.node == node and violations(core) == []
