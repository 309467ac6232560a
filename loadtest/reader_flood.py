"""Filter latency with and without a reader flood: does reading stall scheduling?

    python -m loadtest.reader_flood [--nodes 1000] [--filters 200] [--readers 8] [--explainers 4]

One server on a generated cluster. One keep-alive client places one-pod gangs (filter, then the pod
is deleted, so every round starts from the same state) and times each filter, first alone, then
while `--readers` threads loop on the dearest reads (`/v1/inspect/clusterstatus`, `/v1/ui/state`,
`/v1/inspect/affinitygroups`) and `--explainers` threads on `/v1/explain`, each from its own
connection. Everything is bounded: a fixed number of filters, and the readers stop with them.
Prints filter p50/p99 alone and under the flood, their ratio, and what the readers were answered
(200, or 429 past the read limits). Nothing is asserted: the machine is shared, the numbers are for
reading (README, Benchmarks).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from extender import kubesched
from loadtest.scaling import rack_size_for
from loadtest.servers import HOST, Http, free_port, wait_ready

SPEC = "topogang.io/pod-scheduling-spec"
ENABLE = "topogang.io/pod-scheduling-enable"
READS = ("/v1/inspect/clusterstatus", "/v1/ui/state", "/v1/inspect/affinitygroups")


def pod(vc: str, tag: str) -> dict[str, Any]:
    uid = f"rf-{tag}-{uuid.uuid4().hex[:8]}"
    spec = {"virtualCluster": vc, "leafCellNumber": 1, "affinityGroup": {"name": f"rf/{uid}", "members": [
        {"podNumber": 1, "leafCellNumber": 1}]}}  # fmt: skip
    return {
        "metadata": {
            "uid": uid,
            "name": uid,
            "namespace": "rf",
            "annotations": {SPEC: orjson.dumps(spec).decode()},
        },
        "spec": {"containers": [{"name": "m", "resources": {"limits": {ENABLE: "1"}}}]},
    }


def quantile(xs: Sequence[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))] if s else 0.0


def filters(port: int, verbs: int, names: list[str], vc: str, count: int, tag: str) -> list[float]:
    """`count` placing filters (ms), on the verbs listener `verbs`; each pod is deleted after, so the
    state stays the same."""
    out = []
    with contextlib.closing(Http(port, verbs_port=verbs)) as c:
        for k in range(count):
            p = pod(vc, f"{tag}{k}")
            body = orjson.dumps({"Pod": p, "Nodes": None, "NodeNames": names})
            t0 = time.perf_counter()
            status, doc = c.call("POST", "/v1/extender/filter", body)
            out.append((time.perf_counter() - t0) * 1e3)
            if status != 200 or doc.get("Error") or not doc.get("NodeNames"):
                raise RuntimeError(f"filter failed: {status} {str(doc)[:200]}")
            c.delete(p["metadata"]["uid"])
    return out


def reader(port: int, stop: threading.Event, seen: Counter[str], explain: bytes | None) -> None:
    conn = http.client.HTTPConnection(HOST, port, timeout=120)
    try:
        while not stop.is_set():
            for path in READS if explain is None else ("/v1/explain",):
                headers = {"Content-Type": "application/json"} if explain is not None else {}
                conn.request("POST" if explain else "GET", path, body=explain, headers=headers)
                r = conn.getresponse()
                r.read()
                seen[f"{path} {r.status}"] += 1
                if r.status == 429:
                    time.sleep(float(r.getheader("retry-after") or 1) / 10)
    except (OSError, http.client.HTTPException) as exc:
        seen[f"error {type(exc).__name__}"] += 1
    finally:
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    from config.generate import generate_yaml

    ap = argparse.ArgumentParser(prog="python -m loadtest.reader_flood", description=__doc__)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--filters", type=int, default=200, help="filters per phase")
    ap.add_argument("--readers", type=int, default=8)
    ap.add_argument("--explainers", type=int, default=4)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "cluster.yaml"
        cfg.write_text(generate_yaml(nodes=args.nodes, rack_size=rack_size_for(args.nodes)))
        port, verbs = free_port(), free_port()
        argv_ = [sys.executable, "-m", "topogang_cli", "serve", "--config", str(cfg)]
        proc = subprocess.Popen(
            [
                *argv_,
                "--listen",
                f"{HOST}:{port}",
                "--verbs-listen",
                f"{HOST}:{verbs}",
                "--log-level",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_ready(port, proc)
            with contextlib.closing(Http(port)) as c:
                names = kubesched.node_names(c.call("GET", kubesched.PHYSICAL_CLUSTER)[1])
                vc = sorted(c.call("GET", "/v1/inspect")[1]["virtualClusters"])[0]
            filters(port, verbs, names, vc, 20, "warm")
            alone = filters(port, verbs, names, vc, args.filters, "alone")
            stop = threading.Event()
            seen: Counter[str] = Counter()
            explain = orjson.dumps({"Pod": pod(vc, "whatif")})
            threads = [
                threading.Thread(target=reader, args=(port, stop, seen, None)) for _ in range(args.readers)
            ]
            threads += [
                threading.Thread(target=reader, args=(port, stop, seen, explain))
                for _ in range(args.explainers)
            ]
            for t in threads:
                t.start()
            try:
                flooded = filters(port, verbs, names, vc, args.filters, "flood")
            finally:
                stop.set()
                for t in threads:
                    t.join(timeout=180)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    a50, a99, f50, f99 = (
        quantile(alone, 0.5),
        quantile(alone, 0.99),
        quantile(flooded, 0.5),
        quantile(flooded, 0.99),
    )
    print(f"reader_flood: {args.nodes} nodes, {args.filters} filters a phase")
    print(f"  filter alone        p50 {a50:8.2f} ms   p99 {a99:8.2f} ms")
    print(
        f"  filter under flood  p50 {f50:8.2f} ms   p99 {f99:8.2f} ms"
        f"   ({args.readers} readers, {args.explainers} explainers)"
    )
    print(f"  ratio (flood/alone) p50 {f50 / a50:8.2f}      p99 {f99 / a99:8.2f}")
    for key, n in sorted(seen.items()):
        print(f"  readers: {key}: {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
