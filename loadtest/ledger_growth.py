"""Does the gang ledger forget? Many short gangs through one standalone server, memory read as it goes.

    python -m loadtest.ledger_growth [--gangs 21500] [--ttl 2] [--nodes 64] [--clients 2]

One `topogang serve` on a generated cluster whose reservations expire after `--ttl` seconds. Each
client drives two-pod gangs (one GPU a pod) through the verbs, in turn of four kinds:

    done      both members filtered and bound, then both pods deleted: the gang is released
    done      the same again (half the gangs finish)
    expired   one member filtered, the other never comes: the reservation expires (a tombstone)
    deleted   one member filtered and bound, then its pod deleted; the gang expires in its turn

so half the gangs end Expired, more than the ledger's tombstone cap (10,000) when `--gangs` is over
20,000, as in the report that 21,500 gangs grew the RSS from 61 to 447 MiB. It prints, every quarter
of the run and after waiting three TTLs: the server's RSS, the ledger's records by phase (the
`topogang_ledger_gangs` gauge of `/metrics`), and what `GET /v1/gangs` answers: the first page's
bytes, and the pages and bytes of the whole list walked with `continue`. The run is bounded by
`--gangs`; the server is stopped at the end. Nothing is asserted (the integration test
`tests/integration/test_ledger_forgets.py` does that on a small run): the numbers are for reading.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from loadtest.measure import rss_mib
from loadtest.scaling import rack_size_for
from loadtest.servers import HOST, Children, Http, free_port, wait_ready

SPEC = "topogang.io/pod-scheduling-spec"
ENABLE = "topogang.io/pod-scheduling-enable"
KINDS = ("done", "done", "expired", "deleted")


def member(gang: str, vc: str, index: int) -> dict[str, Any]:
    """Member `index` of a two-pod, one-GPU-a-pod gang in namespace `lg`."""
    uid = f"{gang}-m{index}"
    spec = {"virtualCluster": vc, "leafCellNumber": 1, "affinityGroup": {"name": gang, "members": [
        {"podNumber": 2, "leafCellNumber": 1}]}}  # fmt: skip
    return {
        "metadata": {
            "uid": uid,
            "name": uid,
            "namespace": "lg",
            "annotations": {SPEC: orjson.dumps(spec).decode()},
        },
        "spec": {"containers": [{"name": "m", "resources": {"limits": {ENABLE: "1"}}}]},
    }


class Client:
    """One keep-alive client placing gangs; what it saw, by outcome."""

    def __init__(
        self, port: int, verbs: int, names: Sequence[str], vcs: Sequence[str], kinds: Sequence[str] = KINDS
    ) -> None:
        self.c = Http(port, verbs_port=verbs)
        self.kinds = list(kinds)
        self.names = orjson.dumps(list(names))
        self.vcs = list(vcs)
        self.seen: Counter[str] = Counter()

    def filter(self, pod: dict[str, Any]) -> str | None:
        body = b'{"Pod":' + orjson.dumps(pod) + b',"Nodes":null,"NodeNames":' + self.names + b"}"
        status, doc = self.c.call("POST", "/v1/extender/filter", body)
        nodes = (doc or {}).get("NodeNames") or [] if status == 200 else []
        return str(nodes[0]) if nodes else None

    def bind(self, pod: dict[str, Any], node: str) -> bool:
        m = pod["metadata"]
        args = {"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"], "Node": node}
        status, doc = self.c.call("POST", "/v1/extender/bind", orjson.dumps(args))
        return status == 200 and not (doc or {}).get("Error")

    def delete(self, pod: dict[str, Any]) -> None:
        self.c.call("DELETE", f"/v1/standalone/pods/{pod['metadata']['uid']}?finished=true")

    def gang(self, n: int, tag: str) -> None:
        kind = self.kinds[n % len(self.kinds)]
        name = f"lg-{tag}-{n}"
        pods = [member(name, self.vcs[n % len(self.vcs)], i) for i in range(2)]
        node = self.filter(pods[0])
        if node is None:
            self.seen["waited"] += 1  # the VC was full: a Pending gang, forgotten once its pods are gone
            self.delete(pods[0])
            return
        if kind == "expired":
            self.seen[kind] += 1
            return
        if not self.bind(pods[0], node):
            self.seen["bind failed"] += 1
            return
        if kind == "deleted":
            self.delete(pods[0])
            self.seen[kind] += 1
            return
        second = self.filter(pods[1])
        if second is None or not self.bind(pods[1], second):
            self.seen["second member failed"] += 1
        for p in pods:
            self.delete(p)
        self.seen[kind] += 1


def ledger_counts(c: Http) -> dict[str, int]:
    """`topogang_ledger_gangs` by phase, read from the open `/metrics`."""
    c.conn.request("GET", "/metrics")
    text = c.conn.getresponse().read().decode()
    out: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("topogang_ledger_gangs{"):
            labels, value = line.rsplit(" ", 1)
            phase = labels.split('phase="', 1)[1].split('"', 1)[0]
            out[phase] = int(float(value))
    return out


def gangs_pages(c: Http) -> tuple[int, int, int]:
    """(bytes of the first page, pages, bytes of every page) of `GET /v1/gangs`, default limit."""
    first, pages, total, token = 0, 0, 0, ""
    while True:
        path = "/v1/gangs" + (f"?continue={urllib.parse.quote(token)}" if token else "")
        c.conn.request("GET", path)
        resp = c.conn.getresponse()
        raw = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {resp.status}: {raw[:200]!r}")
        pages += 1
        total += len(raw)
        first = first or len(raw)
        token = (orjson.loads(raw).get("metadata") or {}).get("continue") or ""
        if not token:
            return first, pages, total


def report(label: str, pid: int, port: int) -> None:
    with contextlib.closing(Http(port, 120.0)) as c:  # its own connection: an idle one may be closed
        counts = ledger_counts(c)
        first, pages, total = gangs_pages(c)
    phases = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v)
    print(
        f"{label:<28} RSS {rss_mib(pid):6.1f} MiB   ledger {sum(counts.values()):>6} records "
        f"({phases or 'none'})"
        f"   /v1/gangs first page {first / 1024:7.1f} KiB, {pages} pages, {total / 1024:8.1f} KiB in all",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    from config.generate import generate_data

    ap = argparse.ArgumentParser(prog="python -m loadtest.ledger_growth", description=__doc__)
    ap.add_argument("--gangs", type=int, default=21_500)
    ap.add_argument("--ttl", type=int, default=2, help="reservation TTL in seconds (default %(default)s)")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help="the gangs' outcomes in turn (done, expired, deleted; default %(default)s): "
        "`--kinds done` alone leaves no tombstone, so any growth is a leak",
    )
    args = ap.parse_args(argv)
    kids = Children()
    with tempfile.TemporaryDirectory(prefix="ledger-growth-") as tmp:
        data = generate_data(args.nodes, 8, rack_size_for(args.nodes), 4, "A100")
        data.setdefault("topogang", {})["reservationTtlSeconds"] = args.ttl
        cfg = Path(tmp) / "cluster.yaml"
        cfg.write_text(yaml.safe_dump(data, sort_keys=False))
        port, verbs = free_port(), free_port()
        argv_ = [
            sys.executable,
            "-m",
            "topogang_cli",
            "serve",
            "--config",
            str(cfg),
            "--log-level",
            "warning",
        ]
        argv_ += ["--listen", f"{HOST}:{port}", "--verbs-listen", f"{HOST}:{verbs}"]
        try:
            proc = kids.start(argv_, Path(tmp) / "server.log")
            wait_ready(port, proc)
            with contextlib.closing(Http(port)) as c:
                cluster = c.cluster()
                names, vcs = cluster.nodes, sorted(cluster.vc_quota) or ["vc1"]
                print(
                    f"{args.gangs} two-pod gangs, {args.nodes} nodes, TTL {args.ttl} s, "
                    f"{args.clients} clients"
                )
                report("start", proc.pid, port)
                kinds = [k for k in args.kinds.split(",") if k]
                if not kinds or set(kinds) - set(KINDS):
                    ap.error(f"--kinds: expected a list of {', '.join(sorted(set(KINDS)))}")
                clients = [Client(port, verbs, names, vcs, kinds) for _ in range(args.clients)]
                counter: Counter[str] = Counter()
                started = time.monotonic()
                quarter = max(1, args.gangs // 4)
                for q in range(4):
                    stop_at = args.gangs if q == 3 else (q + 1) * quarter
                    threads = [
                        threading.Thread(target=drive, args=(cl, str(k), counter, stop_at))
                        for k, cl in enumerate(clients)
                    ]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                    report(f"after {stop_at:,} gangs ({time.monotonic() - started:.0f} s)", proc.pid, port)
                wait = 3 * args.ttl + 6
                time.sleep(wait)
                report(f"{wait} s later (3 TTLs)", proc.pid, port)
                seen: Counter[str] = Counter()
                for cl in clients:
                    seen.update(cl.seen)
                    cl.c.close()
                print("gangs by outcome: " + ", ".join(f"{k} {v}" for k, v in sorted(seen.items())))
        finally:
            kids.stop_all()
    return 0


_LOCK = threading.Lock()


def drive(client: Client, tag: str, counter: Counter[str], stop_at: int) -> None:
    """Gangs through `client` until the clients together have started `stop_at` of them."""
    while True:
        with _LOCK:
            n = counter["started"]
            if n >= stop_at:
                return
            counter["started"] = n + 1
        client.gang(n, tag)


if __name__ == "__main__":
    raise SystemExit(main())
