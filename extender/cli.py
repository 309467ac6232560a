"""`topogang serve`: run the extender, standalone on a config file or against a Kubernetes cluster.

    topogang serve                                  standalone, bundled example cluster, 127.0.0.1:9096
    topogang serve --config my-cluster.yaml --port 8080
    topogang serve --kube --config /etc/topogang/config.yaml        in-cluster (service account)
    topogang serve --kubeconfig ~/.kube/config --config my-cluster.yaml

Without `--kube` or `--kubeconfig` nothing talks to Kubernetes: bindings are kept in memory. The
listen address is `--listen`, else the config's `topogang.listenAddress` / `webServerAddress`
(HiveD's `:9096`); an address without a host means 127.0.0.1 standalone and 0.0.0.0 in a cluster.

Two listeners: the read listener (`--listen`: the gang ledger, the barrier, inspect, the UI, metrics,
probes) and the verbs listener (`--verbs-listen`, default the next port: kube-scheduler's
filter/prioritize/preempt/bind and standalone's state-changing routes). With `--client-ca` and
`--verbs-allowed-names` only a client certificate signed by that CA and carrying one of those names
(subject CN or subjectAltName) reaches the verbs (docs/security.md).
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
from typing import Any, cast

import uvloop

from config.load import ConfigError, LoadedConfig, load_config
from config.schema import ENTITLEMENT_MODES
from extender.gangs.entitlement import OPEN_WARNING
from extender.http.app import Service, build_apps
from extender.http.httpproto import JSONErrorsHttpTools
from extender.http.limits import ProtectedHttpTools, ServerLimits, parse_hosts, raise_open_files
from extender.http.tls import CertifiedHttpTools, TlsSettings, VerbsDoor
from extender.ops import logtext
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
    ap.add_argument(
        "--default-entitlement",
        default="open",
        choices=list(ENTITLEMENT_MODES),
        help="what a namespace without a topogang.tenants entry may use when the config's "
        "topogang.defaultEntitlement is unset: open (every VC at every priority, HiveD's trust), "
        "opportunistic (its namespaceVirtualClusters VC, else priority -1 only), none (its "
        "namespaceVirtualClusters VC, else nothing); default open",
    )
    ap.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    ap.add_argument("--tls-cert", default=None, help="serve HTTPS with this certificate (PEM)")
    ap.add_argument("--tls-key", default=None, help="private key of --tls-cert (PEM)")
    ap.add_argument(
        "--verbs-listen",
        default=None,
        help="HOST:PORT of the verbs listener (default: the read listener's host, its port + 1)",
    )
    ap.add_argument(
        "--verbs-tls-cert", default=None, help="the verbs listener's certificate (default: --tls-cert)"
    )
    ap.add_argument("--verbs-tls-key", default=None, help="private key of --verbs-tls-cert (PEM)")
    ap.add_argument(
        "--client-ca",
        default=None,
        help="the verbs listener requires client certificates signed by this CA (mutual TLS)",
    )
    ap.add_argument(
        "--verbs-allowed-names",
        action="append",
        default=[],
        metavar="NAME[,NAME...]",
        help="with --client-ca: the client certificate names (subject CN or subjectAltName) allowed to "
        "call the verbs; any other certificate gets 403",
    )
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
    ap.add_argument(
        "--dra",
        action="store_true",
        help="with --kube: topogang allocates its pods' ResourceClaims (its kube-scheduler profile has "
        "the DynamicResources plugin off; README 'GPUs in the container')",
    )
    ap.add_argument("--dra-driver", default="gpu.nvidia.com", help="with --dra: the GPUs' DRA driver")
    ap.add_argument("--dra-device-class", default="gpu.nvidia.com", help="with --dra: the GPUs' DeviceClass")
    ap.add_argument(
        "--dra-order-by",
        default="resource.kubernetes.io/pciBusID",
        help="with --dra: the device attribute whose order numbers the GPUs as the config does",
    )
    ap.add_argument("--lease-name", default="topogang-extender", help="name of the leader-election Lease")
    ap.add_argument("--lease-seconds", type=float, default=15.0, help="Lease duration (default 15)")
    ap.add_argument("--renew-deadline", type=float, default=10.0, help="leader gives up after (default 10)")
    ap.add_argument("--retry-seconds", type=float, default=2.0, help="Lease retry/renew period (default 2)")
    ap.add_argument(
        "--bind-signing-key-file",
        default=None,
        help="key (>= 32 bytes) signing bind info; a restart adopts only bind info it signed (with --kube)",
    )
    ap.add_argument(
        "--adopt-unsigned-bind-info",
        action="store_true",
        help="switching over from HiveD: adopt its unsigned bind info at this first start (with --kube)",
    )
    d = ServerLimits()
    lim = ap.add_argument_group("self-protection (extender.http.limits)")
    lim.add_argument("--max-connections", type=int, default=d.max_connections, help="open connections kept")
    lim.add_argument(
        "--head-timeout", type=float, default=d.head_timeout, help="seconds to send a whole request head"
    )
    lim.add_argument("--max-requests", type=int, default=d.max_requests, help="requests at once (503 beyond)")
    lim.add_argument("--max-reads", type=int, default=d.max_reads, help="reads at once (429 beyond)")
    lim.add_argument("--reads-per-client", type=int, default=d.reads_per_client, help="reads per caller")
    lim.add_argument("--max-explains", type=int, default=d.max_explains, help="/v1/explain at once")
    lim.add_argument(
        "--explains-per-client", type=int, default=d.explains_per_client, help="explains per caller"
    )
    lim.add_argument(
        "--long-polls-per-client", type=int, default=d.polls_per_client, help="long-polls per caller"
    )
    lim.add_argument(
        "--allowed-hosts",
        default="",
        help="extra Host names to answer (comma-separated; IPs, localhost and *.svc always; * for any)",
    )
    return ap


def limits_from(args: argparse.Namespace, listen_host: str) -> ServerLimits:
    hosts = parse_hosts(args.allowed_hosts)
    if listen_host not in ("", "0.0.0.0", "::"):
        hosts += (listen_host.lower(),)
    return ServerLimits(
        max_connections=args.max_connections,
        head_timeout=args.head_timeout,
        max_requests=args.max_requests,
        max_reads=args.max_reads,
        reads_per_client=args.reads_per_client,
        max_explains=args.max_explains,
        explains_per_client=args.explains_per_client,
        polls_per_client=args.long_polls_per_client,
        allowed_hosts=hosts,
    )


def serve_main(argv: Sequence[str] | None = None) -> int:
    ap = _parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    logtext.configure(args.log_level, sys.stderr)
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
    allowed = tuple(n.strip() for arg in args.verbs_allowed_names for n in arg.split(",") if n.strip())
    tls = TlsSettings(
        args.tls_cert, args.tls_key, args.client_ca, args.verbs_tls_cert, args.verbs_tls_key, allowed
    )
    problems = tls.problems()
    verbs = (host, port + 1 if port else 0)
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
    service.scheduler.entitlement.configure(loaded.extras, args.default_entitlement)
    if service.scheduler.entitlement.rules.mode == "open":
        # a shared cluster left open is a warning; a standalone extender (one machine, 127.0.0.1 unless
        # told otherwise) is told the same plainly, as a fact of its setup
        print(f"{config}: {'warning' if kube else 'note'}: {OPEN_WARNING}", file=sys.stderr)
    limits = limits_from(args, host)
    return run(
        service, host, port, log_level=args.log_level, tls=tls, verbs=verbs, limits=limits, admin=admin
    )


def _service(loaded: LoadedConfig, *, kube: bool, args: argparse.Namespace) -> Service:
    if not kube:
        return build_standalone(loaded, keep_victims=args.keep_victims)
    from extender.gangs.bindsig import load_key
    from extender.kube.leader import LeaseSettings
    from extender.kube.service import DEFAULT_NAMESPACE, build_kube_service

    namespace = args.namespace or DEFAULT_NAMESPACE
    lease = None
    if args.leader_elect:
        lease = LeaseSettings(
            namespace, args.lease_name, args.lease_seconds, args.renew_deadline, args.retry_seconds
        )
    key = load_key(args.bind_signing_key_file) if args.bind_signing_key_file else None
    dra = None
    if args.dra:
        from extender.dra.devices import DraSettings

        dra = DraSettings(
            driver=args.dra_driver, device_class=args.dra_device_class, order_by=args.dra_order_by
        )
    return build_kube_service(
        loaded,
        kubeconfig=args.kubeconfig,
        namespace=namespace,
        lease=lease,
        on_lost=_exit_on_lost,
        on_config_refused=_exit_on_refused,
        signing_key=key,
        adopt_unsigned_bind_info=args.adopt_unsigned_bind_info,
        audience=args.token_audience,
        dra=dra,
        freeze_after_recovery=True,  # as the model is frozen before serving (below)
    )


def _exit_on_lost() -> None:
    """A replica that lost the Lease may hold decisions it no longer owns: leave at once (the
    Deployment restarts it as a standby), as client-go's components do."""
    logging.getLogger("topogang").error("leadership lost: exiting")
    logging.shutdown()
    os._exit(3)


def _exit_on_refused() -> None:
    """The start refused the config (it costs running gangs, unconfirmed): leave, so the Deployment
    restarts the replica until the admin confirms the edit or puts the config back."""
    logging.shutdown()
    os._exit(4)


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


def _loopback(socks: Sequence[socket.socket]) -> bool:
    return all(s.getsockname()[0] in ("127.0.0.1", "::1") for s in socks)


def banner(service: Service, base: str, verbs_base: str, tls: TlsSettings, *, loopback: bool) -> list[str]:
    """What `serve` says at start: where each door is and who may pass it."""
    door = (
        f"client certificate signed by {tls.client_ca} required, allowed names: "
        + ", ".join(tls.allowed_names)
        if tls.mutual
        else "no client certificate asked"
    )
    lines = [
        service.description,
        f"listening on {base}",
        f"  kube-scheduler urlPrefix {verbs_base}/v1/extender (filter, prioritize, preempt, bind) - {door}",
        f"  status {base}/v1/inspect   view {base}/ui   metrics {base}/metrics   ready {base}/readyz",
    ]
    if loopback:
        lines.append("  on 127.0.0.1 only: nothing on another machine reaches it (--listen to change that)")
    elif not tls.mutual:
        lines.append(
            f"  WARNING: the verbs at {verbs_base} answer anyone who can reach them (they reserve and "
            "bind GPUs and evict pods): use --client-ca and --verbs-allowed-names (docs/security.md)"
        )
    return lines


def _url(sock: socket.socket, scheme: str) -> str:
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if sock.family == socket.AF_INET6 else bound_host
    return f"{scheme}://{shown}:{bound_port}"


class _CertifiedProtected(CertifiedHttpTools, ProtectedHttpTools):
    """The verbs listener's protocol under mutual TLS: the peer's certificate names, and the limits."""


def _http_class(limits: ServerLimits, *, certified: bool) -> type[JSONErrorsHttpTools]:
    """uvicorn's `http=` class: this server's head timeout and connection cap, and (for the verbs
    listener under mutual TLS) the client certificate's names in each request's scope."""
    base = _CertifiedProtected if certified else ProtectedHttpTools
    attrs = {"head_timeout": limits.head_timeout, "max_connections": limits.max_connections}
    return cast(type[JSONErrorsHttpTools], type("Protected", (base,), attrs))


def run(
    service: Service,
    host: str,
    port: int,
    *,
    log_level: str = "info",
    tls: TlsSettings | None = None,
    verbs: tuple[str, int] | None = None,
    limits: ServerLimits | None = None,
    admin: tuple[str, int] | None = None,
) -> int:
    """Serve until interrupted; sockets are bound first so the printed addresses are the real ones.

    The read listener (`host:port`) serves `build_apps(service).reads`, the verbs listener (`verbs`,
    default the next port) `.verbs`: with a client CA in `tls` its handshake requires a client
    certificate, and `VerbsDoor` lets only the allowed names through. With `admin` one more listener
    (plain HTTP, meant for 127.0.0.1) serves the read routes past the doors (`extender.http.doors`)."""
    import uvicorn

    limits = limits or ServerLimits()
    tls = tls or TlsSettings()
    before, after = raise_open_files()
    if after > before:
        print(f"topogang: open-file limit raised from {before} to {after}", flush=True)
    verbs = verbs or (host, port + 1 if port else 0)
    socks: list[socket.socket] = []
    try:
        socks.append(_listen(host, port))
        socks.append(_listen(*verbs))
        if admin is not None:
            admin_sock = _listen(*admin)
            socks.append(admin_sock)
    except OSError as exc:
        for s in socks:
            s.close()
        print(f"topogang serve: cannot listen: {exc.strerror or exc}", file=sys.stderr)
        return 1
    base = _url(socks[0], "https" if tls.enabled else "http")
    verbs_base = _url(socks[1], "https" if tls.verbs_enabled else "http")
    for line in banner(service, base, verbs_base, tls, loopback=_loopback(socks)):
        print(f"topogang: {line}", flush=True)
    if admin is not None:  # before the apps are built: their doors let this port's callers through
        service.admin_port = admin_sock.getsockname()[1]
        print(f"topogang:   admin (no token) {_url(admin_sock, 'http')}", flush=True)
    apps = build_apps(service, limits)
    verbs_app: Any = VerbsDoor(apps.verbs, tls.allowed_names) if tls.mutual else apps.verbs
    # The cluster model built so far (~80k objects at 1,000 nodes) lives as long as the process: out
    # of the cyclic GC's reach, a full collection takes microseconds instead of ~40 ms, a pause that
    # would otherwise land on whichever request triggers it.
    gc.freeze()

    def config(app: Any, *, for_verbs: bool, plain: bool = False) -> uvicorn.Config:
        return uvicorn.Config(
            app,
            loop="uvloop",
            http=_http_class(limits, certified=for_verbs and tls.mutual),  # head timeout, cap, JSON 400s
            ws="none",  # no WebSocket routes: an Upgrade is a plain request (else a text/plain 400)
            access_log=False,
            log_level=log_level,
            lifespan="off" if for_verbs or plain else "on",  # the service runs once, with the read app
            timeout_graceful_shutdown=5,
            **({} if plain else tls.uvicorn_options(verbs=for_verbs)),
        )

    servers = [
        uvicorn.Server(config(apps.reads, for_verbs=False)),
        uvicorn.Server(config(verbs_app, for_verbs=True)),
    ]
    if admin is not None:
        servers.append(uvicorn.Server(config(apps.reads, for_verbs=False, plain=True)))

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
