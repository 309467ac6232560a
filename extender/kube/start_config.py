"""A start judges the config it reads as a hot reload does: an edit that costs running gangs GPUs
is not taken up unless confirmed.

A hot reload refuses such an edit until `confirm-capacity-loss` names its digest
(`extender.http.reload`), and the running config stays in force. The refused file stays on disk,
though, and a restart (a rolling upgrade, a node drained under the extender, a crash) would read it
and rebuild every gang under it: the refusal would hold only until the process next started. So the
start's recovery reports what the config cost the gangs that run (`RecoveryReport.costs`: their
pods on nodes it does not have), and an unconfirmed cost stops the start: the replica stays not
ready, says why (log, `ConfigRejected` Event on its own pod, /readyz) and, under `topogang serve`,
exits, so the Deployment restarts it until the admin confirms the edit or puts the config back,
while a replica that still runs the config in force keeps serving. A confirmed cost is taken up as
the reload takes it up: the running pods of gangs not whole yet whose placement lost nodes are
evicted (such a gang can never be whole where it was placed).

What a start cannot judge is a VC shrunk below what runs: a gang lazily preempted before the restart
comes back opportunistic under the very config it ran under (its bind info still records the quota
cells it held), so a gang that comes back opportunistic is logged (the recovery's notes), not
refused. Only a hot reload, which knows the config in force, refuses that edit. Nor can a start tell
pods this edit takes out from pods an earlier confirmed edit left running outside the config: while
such pods run, a start after any later edit of the file asks for that edit's digest (a confirmation
names one digest, never the next).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from config.against import config_digest
from config.load import LoadedConfig
from extender.gangs import disruption
from extender.gangs.disruption import OFF_PLACEMENT_WHY
from extender.http.ports import Evictor
from extender.http.reload import read_confirmation
from extender.kube.recovery_report import RecoveryReport

log = logging.getLogger("topogang.kube")


class StartConfig:
    """The start's judgement of the config (`ClusterSync.on_recovered`). Once it refused, `reason`
    holds the sync back from ready: what `/readyz`, open to anyone, says (no gang or pod names, as
    on every open route); `refusal` is the whole text, for the log and the Event."""

    def __init__(
        self,
        loaded: LoadedConfig,
        evict: Evictor,
        tell: Callable[[str], object],
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        self.loaded = loaded
        self.evict = evict
        self.tell = tell  # e.g. a ConfigRejected Event on the extender's own pod
        self.on_refused = on_refused
        self.refusal = ""
        self.reason = ""

    async def judge(self, report: RecoveryReport) -> None:
        costs, file = report.costs(), self.loaded.file
        if costs:
            digest = config_digest(self.loaded)  # ~35 ms at 12,500 nodes: only when there is a cost
            if read_confirmation(file) != digest:
                self._refuse(file, costs, digest)
                return
            log.warning("config %s taken up at the start, its cost confirmed: %s", file, "; ".join(costs))
        if report.evict:
            await self.evict(report.evict, disruption.off_placement(OFF_PLACEMENT_WHY))

    def _refuse(self, file: str, costs: list[str], digest: str) -> None:
        # the digest and what to do first: the log cuts a record at `logtext.MAX_LINE` and an Event
        # at 512 characters, and the costs of a few dozen gangs run past either
        self.refusal = (
            f"config {file} refused at the start: it costs running gangs GPUs; to take it up, write "
            f"{digest} to the file confirm-capacity-loss beside it (Helm: --set-string "
            f"confirmCapacityLoss={digest}), or put back the config they run under. The costs: "
            + "; ".join(costs)
        )
        self.reason = (
            f"config refused at the start: it costs running gangs GPUs (see the log or the ConfigRejected "
            f"Event); confirm digest {digest} or put back the config they run under"
        )
        log.error("%s", self.refusal)
        self.tell(self.refusal)
        if self.on_refused is not None:
            self.on_refused()
