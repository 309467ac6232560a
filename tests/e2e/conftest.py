"""The e2e control plane as a session fixture: etcd + kube-apiserver + kube-scheduler + KWOK GPU nodes.

Opt-in: the e2e tests run only with TOPOGANG_E2E=1 (`make e2e`; `.ci/run` sets it whenever Go is installed) on
a machine with a Go toolchain; otherwise every `e2e`-marked test is skipped and the reason is repeated at the
end of the run. With TOPOGANG_E2E=1 a failure to build or start the control plane fails the tests (it is not
a skip).

The fixture runs the scripts under scripts/e2e (the single source of versions, flags and ports):
build-bins.sh (seconds when the binaries are cached in ~/.cache/topogang-e2e, 20+ minutes cold), cluster-up.sh
in a pytest tmp dir (logs stay there: `pytest --basetemp` or the path printed on failure), and always
cluster-down.sh. cluster-up.sh also gets this process's pid, so a watchdog tears the cluster down if pytest is
killed before it can. topogang itself is installed through the Helm chart (tests/e2e/chart.py says what is
applied from it and what runs as a local process).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
import yaml
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException

from scripts import manifests
from tests.e2e import chart, helpers

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts" / "e2e"
GO_FALLBACK = Path("/usr/local/go/bin/go")
REQUIRED_BINS = ("etcd", "kube-apiserver", "kube-scheduler", "kwok", "helm")
TOPOLOGY = REPO / "config" / "examples" / "example-cluster.yaml"  # cluster-up.sh's default
# Optional in build-bins.sh (the module proxy may refuse FrameworkController): without them only the
# FrameworkController test skips, loudly, or fails when TOPOGANG_E2E_REQUIRE_FC=1 (.ci/run sets it once
# they are built, so a harness regression cannot turn that test into a quiet skip).
FC_BINS = ("frameworkcontroller", "frameworkbarrier")
BUILD_TIMEOUT_S = 3 * 3600  # a cold build on 2 shared cores takes 20-40 minutes
UP_TIMEOUT_S = 600

_report: dict[str, str] = {}


def go_binary() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    return str(GO_FALLBACK) if GO_FALLBACK.is_file() else None


def skip_reason() -> str | None:
    """Why the e2e tests cannot run here, or None."""
    if os.environ.get("TOPOGANG_E2E") != "1":
        return (
            "E2E TESTS SKIPPED: they are opt-in. Set TOPOGANG_E2E=1 or run `make e2e` (builds the control "
            "plane from Go modules into ~/.cache/topogang-e2e first; .ci/run does both when Go is installed)."
        )
    if go_binary() is None:
        return (
            "E2E TESTS SKIPPED: TOPOGANG_E2E=1 but no Go toolchain (neither `go` on PATH nor "
            f"{GO_FALLBACK}) to build the control plane."
        )
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = skip_reason()
    if reason is None:
        return
    skipped = 0
    for item in items:
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
            skipped += 1
    if skipped:
        _report["skip"] = f"{skipped} e2e test(s) skipped. {reason}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for key in ("skip", "fc-skip"):
        if key in _report:
            terminalreporter.write_sep("!", _report[key], yellow=True, bold=True)
    for key in ("build", "up", "helm", "extender", "down"):
        if key in _report:
            terminalreporter.write_line(f"e2e {key}: {_report[key]}")


@dataclass
class E2ECluster:
    """A running control plane. `env` is WORKDIR/env written by cluster-up.sh (ports, URLs, cert paths)."""

    workdir: Path
    env: dict[str, str]
    api: client.ApiClient = field(repr=False)
    chart: chart.ChartRender = field(repr=False)

    @property
    def kubeconfig(self) -> Path:
        return Path(self.env["KUBECONFIG"])

    @property
    def api_url(self) -> str:
        return self.env["API_URL"]

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def log(self, component: str) -> str:
        """The log of one component (etcd, kube-apiserver, kwok, kube-scheduler, ...)."""
        path = self.workdir / "logs" / f"{component}.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _script_env() -> dict[str, str]:
    env = dict(os.environ)
    go = go_binary()
    if go is not None:
        env["PATH"] = f"{env.get('PATH', '')}{os.pathsep}{Path(go).parent}"
    return env


def read_env_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


@pytest.fixture(scope="session")
def e2e_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2ECluster]:
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    env = _script_env()
    base = tmp_path_factory.mktemp("e2e")

    t0 = time.monotonic()
    build_log = base / "build-bins.log"
    with build_log.open("w", encoding="utf-8") as out:
        built = subprocess.run(
            ["bash", str(SCRIPTS / "build-bins.sh"), *REQUIRED_BINS, *FC_BINS],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    if built.returncode != 0:
        pytest.fail(
            f"scripts/e2e/build-bins.sh failed (rc={built.returncode}), log {build_log}:\n"
            + _tail(build_log.read_text(encoding="utf-8", errors="replace")),
            pytrace=False,
        )
    _report["build"] = f"binaries ready in {time.monotonic() - t0:.1f}s (log {build_log})"
    helm = manifests.helm_binary()
    assert helm is not None, "build-bins.sh built no helm"
    topology = Path(os.environ.get("TOPOGANG_E2E_TOPOLOGY") or TOPOLOGY)
    rendered = chart.render(helm, topology, base)
    env["TOPOGANG_E2E_TOPOLOGY"] = str(topology)
    env["TOPOGANG_E2E_SCHEDULER_CONFIG"] = str(chart.scheduler_config_file(rendered))

    workdir = base / "cluster"
    env["TOPOGANG_E2E_OWNER_PID"] = str(os.getpid())
    env["TOPOGANG_E2E_SCHEDULER_LATER"] = "1"  # kube-scheduler needs the chart's client certificate
    t1 = time.monotonic()
    try:
        up = subprocess.run(
            ["bash", str(SCRIPTS / "cluster-up.sh"), str(workdir)],
            capture_output=True,
            text=True,
            env=env,
            timeout=UP_TIMEOUT_S,
            check=False,
        )
        (base / "cluster-up.log").write_text(up.stdout + up.stderr, encoding="utf-8")
        if up.returncode != 0:
            pytest.fail(
                f"scripts/e2e/cluster-up.sh failed (rc={up.returncode}); logs in {workdir}/logs:\n"
                + _tail(up.stderr, 80),
                pytrace=False,
            )
        _report["up"] = f"cluster up in {time.monotonic() - t1:.1f}s (workdir {workdir})"
        cluster_env = read_env_file(workdir / "env")
        api = kube_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=cluster_env["KUBECONFIG"]
        )
        installed = chart.install(helm, Path(cluster_env["KUBECONFIG"]), topology, api)
        _report["helm"] = " ".join(x for x in installed.splitlines() if x.startswith(("NAME:", "STATUS:")))
        cluster_env = start_scheduler(workdir, env, rendered, client.CoreV1Api(api), cluster_env)
        yield E2ECluster(workdir=workdir, env=cluster_env, api=api, chart=rendered)
    finally:
        t2 = time.monotonic()
        down = subprocess.run(
            ["bash", str(SCRIPTS / "cluster-down.sh"), str(workdir)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        (base / "cluster-down.log").write_text(down.stdout + down.stderr, encoding="utf-8")
        _report["down"] = f"teardown rc={down.returncode} in {time.monotonic() - t2:.1f}s"


def start_scheduler(
    workdir: Path,
    env: dict[str, str],
    rendered: chart.ChartRender,
    core: client.CoreV1Api,
    cluster_env: dict[str, str],
) -> dict[str, str]:
    """kube-scheduler, once the chart is installed: it calls the verbs at EXTENDER_PORT the way the
    chart configures it (mutual TLS by default, with the client certificate from the chart's Secret).
    The updated env file."""
    tls = chart.scheduler_tls_dir(rendered, core, workdir)
    url = f"{chart.verbs_scheme(rendered)}://127.0.0.1:{cluster_env['EXTENDER_PORT']}/v1/extender"
    up = subprocess.run(
        ["bash", str(SCRIPTS / "scheduler-up.sh"), str(workdir), url, *([str(tls)] if tls else [])],
        capture_output=True,
        text=True,
        env=env,
        timeout=UP_TIMEOUT_S,
        check=False,
    )
    (workdir.parent / "scheduler-up.log").write_text(up.stdout + up.stderr, encoding="utf-8")
    if up.returncode != 0:
        pytest.fail(
            f"scripts/e2e/scheduler-up.sh failed (rc={up.returncode}); logs in {workdir}/logs:\n"
            + _tail(up.stderr + (workdir / "logs" / "kube-scheduler.log").read_text(errors="replace")),
            pytrace=False,
        )
    return read_env_file(workdir / "env")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fc_binary(cluster: E2ECluster, name: str) -> Path:
    """A FrameworkController binary from the e2e bin dir. Missing: the test fails under
    TOPOGANG_E2E_REQUIRE_FC=1, else it skips and the end of the run says so in a banner."""
    path = Path(cluster.env["E2E_BIN"]) / name
    if os.access(path, os.X_OK):
        return path
    failed = next(Path(cluster.env["E2E_BIN"]).parent.glob(f"stamps/{name}.failed"), None)
    why = f"last build attempt: {failed.read_text(encoding='utf-8').strip()}" if failed else "never built"
    missing = (
        f"{path} is missing ({why}). It is optional in scripts/e2e/build-bins.sh; build it with "
        f"`bash scripts/e2e/build-bins.sh {' '.join(FC_BINS)}` (logs in ~/.cache/topogang-e2e/*/logs)."
    )
    if os.environ.get("TOPOGANG_E2E_REQUIRE_FC") == "1":
        pytest.fail(
            f"TOPOGANG_E2E_REQUIRE_FC=1 (.ci/run sets it once they are built), but {missing}", pytrace=False
        )
    _report["fc-skip"] = f"FRAMEWORKCONTROLLER E2E SKIPPED: {missing}"
    pytest.skip(_report["fc-skip"])


# ------------------------------------------------------------------------------------------------ processes
def _die_with_parent() -> None:
    """preexec_fn: SIGTERM the child when pytest dies, even by SIGKILL (Linux PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


class Process:
    """A child process in its own process group, logged to a file, always terminated."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log: Path,
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log
        self._out: IO[bytes] = log.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.is_file() else ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """TERM the process group, KILL it after `timeout`; the exit code."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._out.close()
        return self.proc.returncode


def extender_command() -> list[str]:
    """How to run `topogang`: $TOPOGANG_E2E_EXTENDER (a command prefix, e.g. a wrapper that patches the
    extender to check that these tests catch a broken one), else this interpreter on topogang_cli.py."""
    override = os.environ.get("TOPOGANG_E2E_EXTENDER", "").strip()
    if override:
        return shlex.split(override)
    return [sys.executable, str(REPO / "topogang_cli.py")]


EXTENDER_ACCOUNT = ("topogang-system", "topogang-extender")  # namespace, ServiceAccount in the chart
TOKEN_SECONDS = 24 * 3600


def service_account_kubeconfig(cluster: E2ECluster) -> Path:
    """A kubeconfig for the extender's own ServiceAccount, with exactly the rights the chart's RBAC gives
    it (installed with the cluster, tests/e2e/chart.py): a token is requested for the account
    (TokenRequest; no controller-manager runs here to mint one). Running the e2e extender with it, not
    with the admin's certificate, makes every test a check that the RBAC covers what the extender does."""
    ns, account = EXTENDER_ACCOUNT
    request = client.AuthenticationV1TokenRequest.model_validate(
        {"spec": {"audiences": [], "expirationSeconds": TOKEN_SECONDS}}
    )
    got = cluster.core.create_namespaced_service_account_token(account, ns, request)
    token = got.status.token if got.status else None
    assert token, f"no token for ServiceAccount {ns}/{account}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "e2e",
                "cluster": {"server": cluster.api_url, "certificate-authority": cluster.env["CA_CERT"]},
            }
        ],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": "e2e", "user": account}}],
        "current-context": account,
    }
    path = cluster.workdir / f"{account}.kubeconfig"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    path.chmod(0o600)
    return path


class Extender:
    """The real extender in Kubernetes mode, its verbs on the port kube-scheduler calls (EXTENDER_PORT in
    env) and its reads on `url`, run with the chart's container args and env (tests/e2e/chart.py),
    connecting with `kubeconfig` (the admin's when None)."""

    def __init__(self, cluster: E2ECluster, kubeconfig: Path | None = None) -> None:
        self.cluster = cluster
        self.verbs_port = int(cluster.env["EXTENDER_PORT"])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_port = helpers.free_port()
        self.admin_url = f"http://127.0.0.1:{self.admin_port}"  # the chart's admin listener: no doors
        self.kubeconfig = kubeconfig or cluster.kubeconfig
        args, self.env = chart.extender_args(
            cluster.chart,
            cluster.core,
            kubeconfig=self.kubeconfig,
            port=self.port,
            verbs_port=self.verbs_port,
            workdir=cluster.workdir,
            admin_port=self.admin_port,
        )
        self.door = chart.door_args(args)  # the verbs' listener and mutual TLS, as the chart sets them
        # the read listener over HTTPS with the chart's certificate (its default), checked with the CA
        # job pods get (the ConfigMap <release>-ca; the same as the read Secret's ca.crt)
        self.ca: Path | None = None
        if "--tls-cert" in args:
            self.ca = chart.read_ca(cluster.chart, cluster.core, cluster.workdir)
            self.url = f"https://127.0.0.1:{self.port}"
            helpers.trust(self.ca)
        self.argv = [*extender_command(), "serve", *args]
        self.starts = 0
        self.process: Process | None = None

    def start(self, timeout: float = 60.0) -> None:
        assert self.process is None or not self.process.alive(), "extender already running"
        self.starts += 1
        log = self.cluster.workdir / "logs" / f"extender-{self.starts}.log"
        self.process = Process("extender", self.argv, log, cwd=REPO, env={**os.environ, **self.env})
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 60.0) -> None:
        proc = self.process
        assert proc is not None
        deadline = time.monotonic() + timeout
        while helpers.http_status(f"{self.url}/readyz", timeout=2) != 200:
            if not proc.alive():
                pytest.fail(
                    f"the extender exited (rc={proc.proc.returncode}) before /readyz:\n{_tail(proc.log())}",
                    pytrace=False,
                )
            if time.monotonic() >= deadline:
                pytest.fail(
                    f"the extender not ready after {timeout:.0f}s:\n{_tail(proc.log())}", pytrace=False
                )
            time.sleep(0.2)

    def stop(self) -> int | None:
        return self.process.stop() if self.process is not None else None

    def run_until_exit(self, timeout: float = 60.0) -> tuple[int | None, str]:
        """Start it and wait for it to leave by itself (a start that refuses its config): its exit
        code and this run's log."""
        assert self.process is None or not self.process.alive(), "extender already running"
        self.starts += 1
        log = self.cluster.workdir / "logs" / f"extender-{self.starts}.log"
        self.process = Process("extender", self.argv, log, cwd=REPO, env={**os.environ, **self.env})
        deadline = time.monotonic() + timeout
        while self.process.alive():
            if time.monotonic() >= deadline:
                self.process.stop()
                pytest.fail(f"the extender still runs after {timeout:.0f}s:\n{_tail(self.process.log())}")
            time.sleep(0.2)
        return self.process.proc.returncode, self.process.log()

    def restart(self) -> None:
        self.stop()
        self.start()

    def ensure_running(self) -> None:
        if self.process is None or not self.process.alive():
            self.start()

    def log(self) -> str:
        """Every run's log, oldest first."""
        logs = self.cluster.workdir / "logs"
        return "".join(
            (logs / f"extender-{i}.log").read_text(encoding="utf-8", errors="replace")
            for i in range(1, self.starts + 1)
            if (logs / f"extender-{i}.log").is_file()
        )

    def get(self, path: str) -> Any:
        """A read as an admin (through the admin listener, as `kubectl port-forward` reaches it)."""
        return helpers.http_json(f"{self.admin_url}{path}")

    def summary(self) -> dict[str, Any]:
        got = self.get("/v1/inspect")
        assert isinstance(got, dict)
        return got


@pytest.fixture(scope="session")
def extender_session(e2e_cluster: E2ECluster) -> Iterator[Extender]:
    """The extender for the whole session, as its ServiceAccount under deploy/rbac.yaml
    (TOPOGANG_E2E_EXTENDER_ADMIN=1: with the admin's certificate instead, to tell an RBAC gap from
    a bug)."""
    admin = os.environ.get("TOPOGANG_E2E_EXTENDER_ADMIN") == "1"
    ext = Extender(e2e_cluster, None if admin else service_account_kubeconfig(e2e_cluster))
    try:
        ext.start()
        yield ext
    finally:
        rc = ext.stop()
        _report["extender"] = (
            f"{ext.starts} start(s) as {'the admin' if admin else 'its ServiceAccount'}, last exit code "
            f"{rc}; logs {e2e_cluster.workdir}/logs"
        )


@pytest.fixture
def extender(extender_session: Extender) -> Extender:
    """The session's extender, started again if a test left it stopped."""
    extender_session.ensure_running()
    return extender_session


def holds_nothing(ext: Extender) -> str | None:
    """Why the extender still holds cells (None when it holds none)."""
    s = ext.summary()
    held = {k: v for k, v in s["gangs"].items() if k != "Waiting" and v}
    used = {vc: row["used"] + row.get("opportunistic", 0) for vc, row in s["virtualClusters"].items()}
    used = {vc: n for vc, n in used.items() if n}
    if held or used or s["gpus"]["free"] + s["gpus"]["bad"] < s["gpus"]["total"]:
        return f"gangs {held}, VC GPUs in use {used}, GPUs {s['gpus']}"
    return None


@pytest.fixture
def gang_ns(e2e_cluster: E2ECluster, extender: Extender) -> Iterator[str]:
    """A fresh namespace for a test's gangs, starting from an extender that holds nothing. Afterwards
    its pods are deleted and the extender must release everything they held (a leak fails the test)."""
    core = e2e_cluster.core
    helpers.wait_until(
        "the extender to hold nothing before the test", lambda: holds_nothing(extender) is None, 30
    )
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace.model_validate({"metadata": {"name": name}}))
    yield name
    names = helpers.object_names(core.list_namespaced_pod(name).items)
    helpers.delete_pods(core, name, names)
    helpers.wait_gone(core, name, names, 60)
    extender.ensure_running()
    deadline = time.monotonic() + 30
    while (why := holds_nothing(extender)) is not None:
        if time.monotonic() > deadline:
            pytest.fail(f"after deleting every pod of {name} the extender still holds cells: {why}")
        time.sleep(0.2)


def ignore_conflict(call: Any, *args: Any, **kw: Any) -> None:
    """Create something cluster-scoped that another test may have created already."""
    try:
        call(*args, **kw)
    except ApiException as exc:
        if exc.status != 409:
            raise


def priority_classes(cluster: E2ECluster, values: dict[str, int]) -> None:
    """PriorityClasses by name and value, shared by tests (a class another test made is kept)."""
    sched = client.SchedulingV1Api(cluster.api)
    for name, value in values.items():
        ignore_conflict(
            sched.create_priority_class,
            client.V1PriorityClass.model_validate({"metadata": {"name": name}, "value": value}),
        )
