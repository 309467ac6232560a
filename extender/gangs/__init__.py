"""Gangs as the edge knows them: what a pod asks for, and what is kept of each gang outside the core.

`podspec` reads the pod contract (which pods are ours, the gang request each one carries);
`framework` reads FrameworkController's `Framework` objects; `bindinfo` writes (and reads back) the
decision a Binding records in the pod; `reservations` keeps reservations no pod records yet as
`GangReservation` objects; `ledger` (with `ledger_records`, `ledger_status`, `ledger_metrics`) is the
gang ledger that FrameworkBarrier waits on; `barrier` is the drop-in FrameworkBarrier itself.
"""
