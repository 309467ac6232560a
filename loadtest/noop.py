"""A no-op extender on topogang's own stack: the baseline every latency goal is a ratio of.

    python -m loadtest.noop --port 9097 [--config cluster.yaml | --nodes 1000]

Same starlette app construction as `extender.http.app` (Route + the JSON response class), same uvicorn
settings as `topogang serve` (uvloop, httptools, no access log), same request handling (the body read
and parsed with `extender.http.wire`, typed by its parsers), and a trivial decision: filter passes every
node it is given, prioritize scores them all 0, bind and preempt succeed without doing anything. It also
answers the reads a load generator makes first (`/v1/inspect`, the physical cluster's node names) and
the standalone pod deletion, so `loadtest/locustfile.py` runs unchanged against it.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from extender.http import replies, wire
from extender.http.app import JSON
from extender.http.nodelists import NodeLists

Handler = Callable[[object], Any]


def build_noop_app(nodes: Sequence[str], gpus_per_node: int = 8) -> Starlette:
    names = list(nodes)
    total = gpus_per_node * len(names)
    summary = {
        "ready": True,
        "nodes": len(names),
        "gpus": {"total": total, "free": total, "bad": 0},
        "virtualClusters": {"noop": {"quota": total, "used": 0, "opportunistic": 0, "free": total}},
    }
    physical = [{"cellType": "NODE", "isNodeLevel": True, "nodeName": n, "cellAddress": n} for n in names]
    lists = NodeLists()  # parses as the extender does, so the comparison is of the decisions alone

    def do_filter(doc: object) -> Any:
        return replies.filter_result(args := wire.parse_extender_args(doc, lists), args.names)

    def do_prioritize(doc: object) -> Any:
        return replies.host_priorities([(n, 0) for n in wire.parse_extender_args(doc, lists).names])

    def do_bind(doc: object) -> Any:
        wire.parse_binding_args(doc)
        return replies.binding_result()

    def do_preempt(doc: object) -> Any:
        wire.parse_preemption_args(doc)
        return replies.preemption_result(None)

    def verb(handle: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return JSON(handle(wire.loads(await request.body(), lists)))
            except wire.WireError as err:
                return JSON({"Error": f"noop: malformed request: {err}"}, status_code=400)

        return endpoint

    async def inspect(request: Request) -> Response:
        return JSON(summary)

    async def cluster(request: Request) -> Response:
        return JSON(physical)

    async def delete_pod(request: Request) -> Response:
        return JSON({"uid": request.path_params["uid"], "wasBound": False, "releasedGang": None, "evict": []})

    async def ok(request: Request) -> Response:
        return JSON({"status": "ok"})

    return Starlette(
        routes=[
            Route("/v1/extender/filter", verb(do_filter), methods=["POST"]),
            Route("/v1/extender/prioritize", verb(do_prioritize), methods=["POST"]),
            Route("/v1/extender/bind", verb(do_bind), methods=["POST"]),
            Route("/v1/extender/preempt", verb(do_preempt), methods=["POST"]),
            Route("/v1/inspect", inspect, methods=["GET"]),
            Route("/v1/inspect/clusterstatus/physicalcluster", cluster, methods=["GET"]),
            Route("/v1/standalone/pods/{uid}", delete_pod, methods=["DELETE"]),
            Route("/healthz", ok, methods=["GET"]),
            Route("/readyz", ok, methods=["GET"]),
        ]
    )


def node_list(config: str | None, nodes: int) -> list[str]:
    if config:
        from config.load import load_config
        from topology.core import Core

        return list(Core(load_config(config).spec).topo.node_names)
    from config.generate import generate_spec
    from topology.model import Topology

    return list(Topology(generate_spec(nodes=nodes)).node_names)


def main(argv: Sequence[str] | None = None) -> int:
    import uvicorn

    ap = argparse.ArgumentParser(prog="python -m loadtest.noop", description=__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9097)
    ap.add_argument("--config", default=None, help="serve this cluster's node names")
    ap.add_argument("--nodes", type=int, default=1000, help="else a generated cluster of this many nodes")
    args = ap.parse_args(argv)
    app = build_noop_app(node_list(args.config, args.nodes))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(2048)
    print(f"noop extender listening on http://{args.host}:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(
        app, loop="uvloop", http="httptools", access_log=False, log_level="warning", lifespan="off"
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
