"""`topogang serve`: run the extender, standalone on a config file or against a Kubernetes cluster.

    topogang serve                                  standalone, bundled example cluster, 127.0.0.1:9096
    topogang serve --config my-cluster.yaml --port 8080
    topogang serve --kube --config /etc/topogang/config.yaml        in-cluster (service account)
    topogang serve --kubeconfig ~/.kube/config --config my-cluster.yaml

Without `--kube` or `--kubeconfig` nothing talks to Kubernetes: bindings are kept in memory. The
listen address is `--listen`, else the config's `topogang.listenAddress` / `webServerAddress`
(HiveD's `:9096`); an address without a host means 127.0.0.1 standalone and 0.0.0.0 in a cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any

import uvloop

from config.load import ConfigError, LoadedConfig, load_config
from extender.http.app import Service, build_app
from extender.ops.tls import TlsSettings, VerbsGuard
from extender.standalone import EXAMPLE_CONFIG, build_standalone


def parse_listen(text: str, default_host: str) -> tuple[str, int]:
    """`host:port`, `:port` or `port` -> (host, port); `ValueError` otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or default_host
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bad listen address {text!r}: expected HOST:PORT with a port 0-65535")
    return host, int(port)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="topogang serve", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--config", default=None, help="cluster config (default: the bundled example cluster)")
    ap.add_argument("--listen", default=None, help="HOST:PORT to listen on (default: from the config)")
    ap.add_argument("--port", type=int, default=None, help="port to listen on (overrides the config's)")
    ap.add_argument("--kube", action="store_true", help="run against Kubernetes (in-cluster or $KUBECONFIG)")
    ap.add_argument("--kubeconfig", default=None, help="kubeconfig file (implies --kube)")
    ap.add_argument(
        "--keep-victims",
        action="store_true",
        help="standalone: preemption victims stay bound until DELETE /v1/standalone/pods/{uid} "
        "(as kube-scheduler deletes them in a cluster); default: evicted at once",
    )
    ap.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    ap.add_argument("--tls-cert", default=None, help="serve HTTPS with this certificate (PEM)")
    ap.add_argument("--tls-key", default=None, help="private key of --tls-cert (PEM)")
    ap.add_argument(
        "--client-ca",
        default=None,
        help="require client certificates signed by this CA for the verbs, served on --verbs-listen",
    )
    ap.add_argument("--verbs-listen", default=None, help="HOST:PORT of the verbs listener (with --client-ca)")
    ap.add_argument(
        "--admin-listen",
        default=None,
        help="HOST:PORT of a listener that reads every route without a token (127.0.0.1 in a pod: "
        "reached only through `kubectl port-forward`)",
    )
    ap.add_argument(
        "--token-audience",
        default="topogang",
        help="with --kube: the audience readers' tokens must carry (TokenReview; '' for the API "
        "server's own; default topogang)",
    )
    ap.add_argument(
        "--namespace",
        default=None,
        help="namespace of its GangReservations and Lease (default: $POD_NAMESPACE or topogang-system)",
    )
    ap.add_argument(
        "--leader-elect",
        action="store_true",
        help="run as one of several replicas: only the holder of the Lease serves (with --kube)",
    )
    ap.add_argument("--lease-name", default="topogang-extender", help="name of the leader-election Lease")
    ap.add_argument("--lease-seconds", type=float, default=15.0, help="Lease duration (default 15)")
    ap.add_argument("--renew-deadline", type=float, default=10.0, help="leader gives up after (default 10)")
    ap.add_argument("--retry-seconds", type=float, default=2.0, help="Lease retry/renew period (default 2)")
    return ap


def serve_main(argv: Sequence[str] | None = None) -> int:
    ap = _parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    kube = args.kube or args.kubeconfig is not None
    config = args.config or (None if kube else str(EXAMPLE_CONFIG))
    if config is None:
        print("topogang serve: --config FILE is required with --kube", file=sys.stderr)
        return 2
    try:
        loaded = load_config(config)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 1
    for line in loaded.warning_lines():
        print(line, file=sys.stderr)
    default_host = "0.0.0.0" if kube else "127.0.0.1"  # in a pod, the Service must reach us
    try:
        host, port = parse_listen(args.listen or loaded.model.listen_address, default_host)
    except ValueError as err:
        print(f"topogang serve: {err}", file=sys.stderr)
        return 2
    if args.port is not None:
        port = args.port
    tls = TlsSettings(args.tls_cert, args.tls_key, args.client_ca)
    problems = tls.problems()
    if args.client_ca is not None and args.verbs_listen is None:
        problems.append("--client-ca needs --verbs-listen HOST:PORT for the verbs")
    verbs: tuple[str, int] | None = None
    if args.verbs_listen is not None:
        try:
            verbs = parse_listen(args.verbs_listen, default_host)
        except ValueError as err:
            problems.append(str(err))
    admin: tuple[str, int] | None = None
    if args.admin_listen is not None:
        try:
            admin = parse_listen(args.admin_listen, "127.0.0.1")
        except ValueError as err:
            problems.append(str(err))
    if problems:
        for p in problems:
            print(f"topogang serve: {p}", file=sys.stderr)
        return 2
    try:
        service = _service(loaded, kube=kube, args=args)
    except Exception as exc:  # kubernetes' ConfigException and friends: no usable cluster credentials
        print(f"topogang serve: cannot connect to Kubernetes: {exc}", file=sys.stderr)
        return 1
    return run(service, host, port, log_level=args.log_level, tls=tls, verbs=verbs, admin=admin)


def _service(loaded: LoadedConfig, *, kube: bool, args: argparse.Namespace) -> Service:
    if not kube:
        return build_standalone(loaded, keep_victims=args.keep_victims)
    from extender.kube.leader import LeaseSettings
    from extender.kube.service import DEFAULT_NAMESPACE, build_kube_service

    namespace = args.namespace or DEFAULT_NAMESPACE
    lease = None
    if args.leader_elect:
        lease = LeaseSettings(
            namespace, args.lease_name, args.lease_seconds, args.renew_deadline, args.retry_seconds
        )
    return build_kube_service(
        loaded,
        kubeconfig=args.kubeconfig,
        namespace=namespace,
        lease=lease,
        on_lost=_exit_on_lost,
        audience=args.token_audience,
    )


def _exit_on_lost() -> None:
    """A replica that lost the Lease may hold decisions it no longer owns: leave at once (the
    Deployment restarts it as a standby), as client-go's components do."""
    logging.getLogger("topogang").error("leadership lost: exiting")
    logging.shutdown()
    os._exit(3)


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    return sock


def _url(sock: socket.socket, scheme: str) -> str:
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if sock.family == socket.AF_INET6 else bound_host
    return f"{scheme}://{shown}:{bound_port}"


def run(
    service: Service,
    host: str,
    port: int,
    *,
    log_level: str = "info",
    tls: TlsSettings | None = None,
    verbs: tuple[str, int] | None = None,
    admin: tuple[str, int] | None = None,
) -> int:
    """Serve until interrupted; sockets are bound first so the printed addresses are the real ones.

    With `verbs` (and a client CA in `tls`) a second listener requiring client certificates serves
    the scheduling verbs, which the main listener then refuses. With `admin` one more listener (plain
    HTTP, meant for 127.0.0.1) serves every route past the doors (`extender.http.doors`)."""
    import uvicorn

    from extender.http.httpproto import JSONErrorsHttpTools

    tls = tls or TlsSettings()
    scheme = "https" if tls.enabled else "http"
    socks: list[socket.socket] = []
    try:
        socks.append(_listen(host, port))
        if verbs is not None:
            socks.append(_listen(*verbs))
        if admin is not None:
            admin_sock = _listen(*admin)
            socks.append(admin_sock)
    except OSError as exc:
        for s in socks:
            s.close()
        print(f"topogang serve: cannot listen: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if admin is not None:
        service.admin_port = admin_sock.getsockname()[1]
        print(f"topogang:   admin (no token) {_url(admin_sock, 'http')}", flush=True)
    base = _url(socks[0], scheme)
    verbs_base = _url(socks[1], scheme) if verbs is not None else base
    print(f"topogang: {service.description}", flush=True)
    print(f"topogang: listening on {base}", flush=True)
    print(
        f"topogang:   kube-scheduler urlPrefix {verbs_base}/v1/extender (filter, prioritize, preempt, bind)"
        + (" - client certificate required" if verbs is not None and tls.client_ca else ""),
        flush=True,
    )
    print(
        f"topogang:   status {base}/v1/inspect   view {base}/ui   metrics {base}/metrics"
        f"   ready {base}/readyz",
        flush=True,
    )
    app: Any = build_app(service)
    # The cluster model built so far (~80k objects at 1,000 nodes) lives as long as the process: out
    # of the cyclic GC's reach, a full collection takes microseconds instead of ~40 ms, a pause that
    # would otherwise land on whichever request triggers it.
    gc.freeze()
    if verbs is not None:
        app = VerbsGuard(app, socks[1].getsockname()[1])

    def config(require_client_cert: bool, plain: bool = False) -> uvicorn.Config:
        return uvicorn.Config(
            app,
            loop="uvloop",
            http=JSONErrorsHttpTools,
            ws="none",  # no WebSocket routes: an Upgrade is a plain request (else a text/plain 400)
            access_log=False,
            log_level=log_level,
            lifespan="off" if require_client_cert or plain else "on",  # one listener runs it
            timeout_graceful_shutdown=5,
            **({} if plain else tls.uvicorn_options(require_client_cert=require_client_cert)),
        )

    servers = [uvicorn.Server(config(False))]
    if verbs is not None:
        servers.append(uvicorn.Server(config(True)))
    if admin is not None:
        servers.append(uvicorn.Server(config(False, plain=True)))

    async def serve_all() -> None:
        await asyncio.gather(*(srv.serve(sockets=[s]) for srv, s in zip(servers, socks, strict=True)))

    try:
        uvloop.run(serve_all())
    except KeyboardInterrupt:
        pass
    finally:
        for s in socks:
            s.close()
    return 0
