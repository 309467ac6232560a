"""Load test: users that drive a topogang extender (or any extender) the way kube-scheduler does.

    locust -f loadtest/locustfile.py --host http://127.0.0.1:9096 [--headless -u 16 -r 16 -t 30s]
        [--fill 0.3] [--mix philly|gang4x8] [--urgent-every 25] [--latency-file out.json]
        [--verbs-ca ca.crt --verbs-cert client.crt --verbs-key client.key]   (with --host https://...)

Every user submits jobs of the Philly week's size mix (gangs of more than 8 GPUs are pods of 8, as
FrameworkController frameworks with an affinityGroup); for each member it calls filter with the FULL
node list (nodeCacheCapable payload, a realistic Pod), prioritize on the survivors, then bind. A filter
answer with FailedNodes leads to preempt (the lower-priority pods bound there are the dry run's
victims), deleting the chosen victims and filtering again. Older jobs finish (their pods are deleted
through `DELETE /v1/standalone/pods/{uid}`) so the cluster stays near `--fill`; every
`--urgent-every` jobs a user submits a high-priority 8-GPU pod. The node list, VC quotas and GPU
count are read from the server (`/v1/inspect`, `/v1/inspect/clusterstatus/physicalcluster`), so it
works against any config. Requests are named by verb: filter, prioritize, bind, preempt, finish.

When the test stops, the pods of jobs still running (or cut off mid-scheduling) are deleted, so the
next run starts from the same fill (a gang that never bound a member keeps its reservation until the
reservation TTL, as in a cluster).

`--latency-file` writes every request's exact latency (ms, per name) and the test's start and stop
times (Unix seconds) when the test stops: locust rounds its own percentiles to whole milliseconds,
too coarse for sub-millisecond replies.

`--verbs-ca`, `--verbs-cert` and `--verbs-key` speak mutual TLS to an `https://` host, as kube-scheduler
does to the chart's verbs listener: the server's certificate checked against the CA, the client's
certificate presented. Each user keeps its connection alive, so the handshake is paid once.
"""

from __future__ import annotations

import random
import socket
import ssl
import time
import urllib.error
import urllib.request
from typing import Any

import gevent.lock
import orjson
from locust import FastHttpUser, events, task
from locust.env import Environment

from loadtest.fleet import (
    FINISH_PATH,
    MIXES,
    Cluster,
    Fleet,
    JobMix,
    cluster_from,
    expected_refusal,
    run_job,
)

VERBS = ("filter", "prioritize", "bind", "preempt")
JSON_HEADERS = {"Content-Type": "application/json"}

_lock = gevent.lock.Semaphore()
_state: dict[str, Any] = {}  # one cluster view and one fleet per locust process, shared by its users
_latencies: dict[str, list[float]] = {}
_window: list[float] = [0.0, 0.0]  # the test's start and stop (time.time())


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    parser.add_argument("--fill", type=float, default=0.3, help="target share of the cluster's GPUs in use")
    parser.add_argument("--mix", choices=MIXES, default="philly", help="job sizes (gang4x8: G1's shape)")
    parser.add_argument(
        "--urgent-every", type=int, default=25, help="a priority-1000 pod every N jobs (0: never)"
    )
    parser.add_argument("--latency-file", default="", help="write exact per-request latencies (ms) here")
    parser.add_argument(
        "--read-host",
        default="",
        help="the extender's read listener, for the cluster view (default: --host, which takes the verbs)",
    )
    parser.add_argument(
        "--verbs-ca", default="", help="CA file the https:// host's certificate is checked with"
    )
    parser.add_argument(
        "--verbs-cert", default="", help="client certificate for mutual TLS (with --verbs-key)"
    )
    parser.add_argument("--verbs-key", default="", help="the client certificate's key")


class _NoDelayContext(ssl.SSLContext):
    """A client TLS context whose sockets send at once (TCP_NODELAY), as Go's, and so kube-scheduler's,
    always do. Without it a filter body of more than one TLS record (16 KiB: 1,000 node names) leaves
    its last record to Nagle's algorithm, which waits for the server's delayed ACK: ~40 ms a call that
    measure the client, not the extender."""

    def wrap_socket(self, sock: socket.socket, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return super().wrap_socket(sock, *args, **kwargs)


def _tls_context(opts: Any) -> ssl.SSLContext | None:
    """The client side of mutual TLS from the options, or None when none is given."""
    ca = str(getattr(opts, "verbs_ca", "") or "")
    cert = str(getattr(opts, "verbs_cert", "") or "")
    if not ca and not cert:
        return None
    ctx = _NoDelayContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca:
        ctx.load_verify_locations(cafile=ca)
    else:
        ctx.load_default_certs()
    if cert:
        ctx.load_cert_chain(cert, str(getattr(opts, "verbs_key", "") or "") or None)
    return ctx


@events.request.add_listener
def _record(name: str, response_time: float, exception: BaseException | None, **_: Any) -> None:
    if exception is None:
        _latencies.setdefault(name, []).append(response_time)


@events.test_start.add_listener
def _start(environment: Environment, **_: Any) -> None:
    _latencies.clear()
    _window[:] = [time.time(), 0.0]


@events.test_stop.add_listener
def _stop(environment: Environment, **_: Any) -> None:
    _window[1] = time.time()
    with _lock:
        fleet: Fleet | None = _state.pop("fleet", None)
        _state.clear()
    if fleet is not None and environment.host:
        _clean_up(environment.host, fleet, _tls_context(environment.parsed_options))
    path = getattr(environment.parsed_options, "latency_file", "") if environment.parsed_options else ""
    if path:
        with open(path, "wb") as f:
            f.write(orjson.dumps({"window": _window, "latencies": _latencies}))


def _clean_up(host: str, fleet: Fleet, tls: ssl.SSLContext | None) -> None:
    """Delete the pods of every job left holding GPUs (the users are stopped by now); not counted as
    requests. A web-UI session's next test then starts from a freshly read cluster."""
    for job in fleet.leftovers():
        for uid in job.uids:
            req = urllib.request.Request(host.rstrip("/") + FINISH_PATH.format(uid=uid), method="DELETE")
            try:
                with urllib.request.urlopen(req, timeout=10, context=tls):
                    pass
            except (urllib.error.URLError, OSError):
                pass  # 404 (never bound) or a server already gone: nothing left to free


class KubeScheduler(FastHttpUser):
    """One kube-scheduler scheduling loop (one profile); several users = several loops."""

    def __init__(self, environment: Environment) -> None:
        tls = _tls_context(environment.parsed_options)
        if tls is not None:  # FastHttpUser builds its connection pool from this in its __init__
            self.ssl_context_factory = lambda *_a, **_k: tls
            self.insecure = False  # the host name (127.0.0.1) is checked against the certificate too
        super().__init__(environment)

    def on_start(self) -> None:
        opts = self.environment.parsed_options
        self.fill = float(getattr(opts, "fill", 0.3))
        self.urgent_every = int(getattr(opts, "urgent_every", 25))
        with _lock:
            if "fleet" not in _state:
                cluster = self._cluster()
                _state["fleet"] = Fleet(cluster, self.fill)
                _state["cluster"] = cluster
        self.fleet: Fleet = _state["fleet"]
        self.mix = JobMix(_state["cluster"], getattr(opts, "mix", "philly"))
        self.rng = random.Random()
        self.jobs = 0

    def _cluster(self) -> Cluster:
        read_host = str(getattr(self.environment.parsed_options, "read_host", "") or "")

        def get(path: str) -> Any:
            if read_host:  # the verbs' listener (`--host`) serves no reads
                with urllib.request.urlopen(read_host.rstrip("/") + path, timeout=30) as r:
                    return orjson.loads(r.read())
            with self.client.get(path, name="setup", catch_response=True) as r:
                if r.status_code != 200 or r.content is None:
                    r.failure(f"GET {path}: HTTP {r.status_code}")
                    raise RuntimeError(f"cannot read {path} from {self.host}: HTTP {r.status_code}")
                return orjson.loads(r.content)

        return cluster_from(get("/v1/inspect"), get("/v1/inspect/clusterstatus/physicalcluster"))

    def post(self, verb: str, body: bytes) -> Any:
        with self.client.post(
            f"/v1/extender/{verb}",
            data=body,  # type: ignore[arg-type]  # bytes go out as-is
            headers=JSON_HEADERS,
            name=verb,
            catch_response=True,
        ) as r:
            if r.status_code != 200 or not r.content:
                r.failure(f"HTTP {r.status_code}: {(r.content or b'')[:200]!r}")
                return None
            try:
                doc = orjson.loads(r.content)
            except orjson.JSONDecodeError as exc:
                r.failure(f"reply is not JSON: {exc}")
                return None
            # a filter that cannot place answers in the body (waits); an Error is a failure, but
            # for a bind that lost its gang to a preemption, which kube-scheduler simply retries
            if isinstance(doc, dict) and doc.get("Error") and not expected_refusal(verb, str(doc["Error"])):
                r.failure(str(doc["Error"])[:300])
            return doc

    def delete(self, uid: str) -> None:
        with self.client.delete(FINISH_PATH.format(uid=uid), name="finish", catch_response=True) as r:
            if r.status_code not in (200, 404):
                r.failure(f"HTTP {r.status_code}")

    @task
    def job(self) -> None:
        self.jobs += 1
        urgent = self.urgent_every > 0 and self.jobs % self.urgent_every == 0
        run_job(self.post, self.fleet, self.mix.next(urgent=urgent), self.delete, self.rng)
