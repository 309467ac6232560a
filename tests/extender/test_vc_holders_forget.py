"""A gang its namespace's bound held back [TenantLimit] leaves the queue's book once it no longer
waits (placed, or its pods deleted): the book does not grow with every gang ever held back, and
the namespace's later filters do not walk them all under the verbs' lock."""

from tests.extender.helpers import bind_args, run
from tests.extender.test_entitlement import config, make
from tests.extender.test_vc_order import filtered, gang


def test_a_gang_no_longer_held_back_leaves_the_namespaces_book() -> None:
    async def go() -> None:
        s = make(config("  tenants:\n    vision: {maxReservedGpus: 16}\n"))[0]
        a = gang("a", 2, ns="vision", vc="vision")
        passed, why = await filtered(s, a[0])  # 16 GPUs reserved unbound: at the bound
        assert passed, why
        later = gang("later", 1, ns="vision", vc="vision")[0]
        passed, why = await filtered(s, later)
        assert not passed and "[TenantLimit]" in why, why
        for p in a:  # a binds: the namespace holds nothing unbound
            passed, why = await filtered(s, p)
            assert passed, why
            assert await s.bind(bind_args(p, passed[0])) == {"Error": ""}
        passed, why = await filtered(s, later)  # placed now (8 unbound)
        assert passed, why
        gone = gang("gone", 2, ns="vision", vc="vision")[0]
        passed, why = await filtered(s, gone)  # 8 + 16 > 16
        assert not passed and "[TenantLimit]" in why, why
        await s.pod_gone(gone["metadata"]["uid"])  # deleted while held back
        assert s.holders._by_namespace.get("vision", {}) == {}

    run(go())
