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
import logging
import socket
import sys
from collections.abc import Sequence

from config.load import ConfigError, LoadedConfig, load_config
from extender.app import Service, build_app
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
    ap.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
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
    try:
        service = _service(loaded, kube=kube, kubeconfig=args.kubeconfig)
    except Exception as exc:  # kubernetes' ConfigException and friends: no usable cluster credentials
        print(f"topogang serve: cannot connect to Kubernetes: {exc}", file=sys.stderr)
        return 1
    return run(service, host, port, log_level=args.log_level)


def _service(loaded: LoadedConfig, *, kube: bool, kubeconfig: str | None) -> Service:
    if not kube:
        return build_standalone(loaded)
    from extender.kube.service import build_kube_service

    return build_kube_service(loaded, kubeconfig=kubeconfig)


def run(service: Service, host: str, port: int, *, log_level: str = "info") -> int:
    """Serve until interrupted; the socket is bound first so the printed address is the real one."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        print(f"topogang serve: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    sock.listen(2048)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if family == socket.AF_INET6 else bound_host
    base = f"http://{shown}:{bound_port}"
    print(f"topogang: {service.description}", flush=True)
    print(f"topogang: listening on {base}", flush=True)
    print(
        f"topogang:   kube-scheduler urlPrefix {base}/v1/extender (filter, prioritize, preempt, bind)",
        flush=True,
    )
    print(f"topogang:   status {base}/v1/inspect   metrics {base}/metrics   ready {base}/readyz", flush=True)
    config = uvicorn.Config(
        build_app(service),
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level=log_level,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0
