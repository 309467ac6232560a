"""FrameworkController end to end: the real `frameworkcontroller` creates a two-role Framework's pods,
the extender places them as one gang, and three barriers run as processes on this machine, as the
init container would in each task pod:

- the STOCK `frameworkbarrier` with KUBE_APISERVER_ADDRESS pointed at the extender's Framework proxy
  over the HTTPS the chart serves by default (the zero-image-change integration: pod IPs stay blank
  until the gang ledger calls the gang Ready);
- the stock `frameworkbarrier` against the API server (FrameworkBarrier as it ships, the reference);
- `topogang barrier` (the drop-in, asking the gang ledger).

All three must still be waiting while the gang cannot fit, then exit 0 once it runs, each writing the
same injector.sh with every pod's IP.

The two that ask the extender prove which pod they are as a job pod would: a ServiceAccount token bound
to a task pod, of the audience `topogang` (TokenRequest on the real API server; the extender asks it
back with a TokenReview), in a file (`TOPOGANG_TOKEN_FILE`; the stock barrier through a kubeconfig's
`tokenFile`, which client-go sends only over TLS), checking the extender's certificate with the CA the
chart publishes (ConfigMap `topogang-ca`): the chart's defaults, with no stand-in in between.
The same token reads its own gang and is refused another namespace's and
another gang's; a viewer's token (the chart's ClusterRole) reads /v1/inspect, a plain one is refused.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.conftest import REPO, E2ECluster, Extender, Process, extender_command, fc_binary
from tests.e2e.helpers import (
    BIND_INFO,
    ENABLE,
    GPU,
    PROFILE,
    SPEC,
    delete_pods,
    hold_for,
    pod_events,
    pods_of,
    racks,
    submit_gang,
    tls_for,
    wait_gone,
    wait_running,
    wait_until,
)

pytestmark = pytest.mark.e2e

FC_GROUP, FC_VERSION, FC_PLURAL = "frameworkcontroller.microsoft.com", "v1", "frameworks"
ROLES = (("ps", 1, 4), ("worker", 2, 8))  # (task role, taskNumber, GPUs per task): 20 GPUs, 3 nodes
BARRIER_ENV = {"BARRIER_CHECK_INTERVAL_SEC": "5", "BARRIER_CHECK_TIMEOUT_SEC": "60"}  # FC's minimums
RUNNER = "fw-runner"  # the task pods' ServiceAccount
AUDIENCE = "topogang"  # the chart's extender.readers.tokenAudience


@pytest.fixture
def framework_controller(e2e_cluster: E2ECluster, tmp_path: Path) -> Iterator[Process]:
    """The real frameworkcontroller against the test API server; it installs its own CRD."""
    binary = fc_binary(e2e_cluster, "frameworkcontroller")
    fc_barrier = fc_binary(e2e_cluster, "frameworkbarrier")
    assert fc_barrier.is_file()
    work = tmp_path / "frameworkcontroller"
    work.mkdir()
    # It reads ./frameworkcontroller.yaml (pkg/apis/frameworkcontroller/v1/config.go).
    (work / "frameworkcontroller.yaml").write_text(
        yaml.safe_dump({"kubeConfigFilePath": str(e2e_cluster.kubeconfig)}), encoding="utf-8"
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work)}
    fc = Process(
        "frameworkcontroller", [str(binary)], e2e_cluster.workdir / "logs" / "fc.log", cwd=work, env=env
    )
    custom = client.CustomObjectsApi(e2e_cluster.api)

    def crd_served() -> bool:
        if not fc.alive():
            pytest.fail(f"frameworkcontroller exited (rc={fc.proc.returncode}):\n{fc.log()[-3000:]}")
        try:
            custom.list_cluster_custom_object(FC_GROUP, FC_VERSION, FC_PLURAL)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    try:
        wait_until("frameworkcontroller to install the Framework CRD", crd_served, 60)
        yield fc
    finally:
        fc.stop()


def framework(name: str) -> dict[str, Any]:
    roles = []
    for role, number, gpus in ROLES:
        spec = {"virtualCluster": "vision", "priority": 0, "leafCellNumber": gpus}
        pod = {
            "metadata": {"annotations": {SPEC: yaml.safe_dump(spec)}},
            "spec": {
                "schedulerName": PROFILE,
                "serviceAccountName": RUNNER,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": "fake.invalid/train:1",
                        "env": [{"name": "API_KEY", "value": SECRET}],  # never leaves the extender
                        "resources": {"limits": {ENABLE: "1", GPU: str(gpus)}},
                    }
                ],
            },
        }
        roles.append(
            {
                "name": role,
                "taskNumber": number,
                "frameworkAttemptCompletionPolicy": {"minFailedTaskCount": 1, "minSucceededTaskCount": -1},
                "task": {
                    "retryPolicy": {"fancyRetryPolicy": False, "maxRetryCount": 0},
                    "podGracefulDeletionTimeoutSec": 0,
                    "pod": pod,
                },
            }
        )
    return {
        "apiVersion": f"{FC_GROUP}/{FC_VERSION}",
        "kind": "Framework",
        "metadata": {"name": name},
        "spec": {
            "executionType": "Start",
            "retryPolicy": {"fancyRetryPolicy": True, "maxRetryCount": 0},
            "taskRoles": roles,
        },
    }


SECRET = "e2e-secret-in-the-pod-template"


def token_for(core: client.CoreV1Api, ns: str, account: str, pod: str | None = None) -> str:
    """A ServiceAccount token of the audience topogang (TokenRequest), bound to `pod` when given."""
    spec: dict[str, Any] = {"audiences": [AUDIENCE], "expirationSeconds": 3600}
    if pod is not None:
        meta = core.read_namespaced_pod(pod, ns).metadata
        assert meta is not None
        uid = meta.uid
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": pod, "uid": uid}
    request = client.AuthenticationV1TokenRequest.model_validate({"spec": spec})
    got = core.create_namespaced_service_account_token(account, ns, request)
    assert got.status is not None and got.status.token
    return str(got.status.token)


def service_account(core: client.CoreV1Api, ns: str, name: str) -> None:
    core.create_namespaced_service_account(
        ns, client.V1ServiceAccount.model_validate({"metadata": {"name": name}})
    )


def read_as(url: str, token: str | None) -> tuple[int, Any]:
    """(status, JSON body) of a GET with a bearer token (None: anonymous)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=10, context=tls_for(url)) as resp:
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return int(err.code), json.loads(err.read() or b"null")


def pod_kubeconfig(path: Path, server: str, token_file: Path, ca: Path) -> Path:
    """The kubeconfig a stock FrameworkBarrier gets (docs/security.md, "Job pods"): the extender over
    the chart's HTTPS as its server, checked with the chart's CA, and the pod's projected token as its
    user's tokenFile."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "topogang", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "pod", "user": {"tokenFile": str(token_file)}}],
        "contexts": [{"name": "topogang", "context": {"cluster": "topogang", "user": "pod"}}],
        "current-context": "topogang",
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def injector_ips(text: str) -> dict[str, list[str]]:
    """FB_{ROLE}_IPS from an injector.sh."""
    return {m[1].lower(): m[2].split(",") for m in re.finditer(r"^export FB_(\w+)_IPS=(\S*)$", text, re.M)}


def test_framework_gang_and_barriers(
    e2e_cluster: E2ECluster,
    extender: Extender,
    gang_ns: str,
    framework_controller: Process,
    tmp_path: Path,
) -> None:
    core = e2e_cluster.core
    custom = client.CustomObjectsApi(e2e_cluster.api)
    ns, name = gang_ns, "fw"
    expected = [f"{name}-{role}-{i}" for role, n, _ in ROLES for i in range(n)]

    # vision's rack is taken: 16 of vision's GPUs stay free, the Framework needs 20, so it waits whole.
    blocker = submit_gang(core, ns, "blocker", 4, 8, "vision")
    wait_running(core, ns, blocker)
    service_account(core, ns, RUNNER)
    custom.create_namespaced_custom_object(FC_GROUP, FC_VERSION, ns, FC_PLURAL, framework(name))
    wait_until(
        "frameworkcontroller to create the task pods", lambda: len(pods_of(core, ns, expected)) == 3, 60
    )
    wait_until("every task pod to be filtered", lambda: all(pod_events(core, ns, p) for p in expected), 30)
    fw = custom.get_namespaced_custom_object(FC_GROUP, FC_VERSION, ns, FC_PLURAL, name)
    assert isinstance(fw, dict)
    attempt = str(fw["status"]["attemptStatus"]["instanceUID"])

    base = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "FC_FRAMEWORK_NAMESPACE": ns,
        "FC_FRAMEWORK_NAME": name,
    }
    stock = Path(e2e_cluster.env["E2E_BIN"]) / "frameworkbarrier"
    dirs = {k: tmp_path / k for k in ("proxy", "apiserver", "topogang")}
    for d in dirs.values():
        d.mkdir()
    logs = e2e_cluster.workdir / "logs"
    # The task pod fw-worker-0's own token, as its projected volume would hold it.
    token = token_for(core, ns, RUNNER, f"{name}-worker-0")
    token_file = tmp_path / "token"
    token_file.write_text(token, encoding="utf-8")
    assert extender.ca is not None and extender.url.startswith("https://"), "the chart serves reads over TLS"
    doors(extender, ns, name, token, core)
    barriers = {
        # The stock barrier with the extender as its API server and the pod's token (a kubeconfig).
        "proxy": Process(
            "frameworkbarrier-proxy",
            [str(stock)],
            logs / "barrier-proxy.log",
            cwd=dirs["proxy"],
            env={
                **base,
                **BARRIER_ENV,
                "HOME": str(dirs["proxy"]),
                "KUBE_APISERVER_ADDRESS": extender.url,
                "KUBECONFIG": str(
                    pod_kubeconfig(tmp_path / "pod.kubeconfig", extender.url, token_file, extender.ca)
                ),
            },
        ),
        "apiserver": Process(
            "frameworkbarrier-apiserver",
            [str(stock)],
            logs / "barrier-apiserver.log",
            cwd=dirs["apiserver"],
            env={
                **base,
                **BARRIER_ENV,
                "HOME": str(dirs["apiserver"]),
                "KUBECONFIG": str(e2e_cluster.kubeconfig),
            },
        ),
        "topogang": Process(
            "topogang-barrier",
            [*extender_command(), "barrier"],
            logs / "barrier-topogang.log",
            cwd=REPO,
            env={
                **base,
                **BARRIER_ENV,
                "HOME": str(dirs["topogang"]),
                "KUBECONFIG": str(e2e_cluster.kubeconfig),
                "TOPOGANG_LEDGER_URL": extender.url,
                "TOPOGANG_TOKEN_FILE": str(token_file),
                "TOPOGANG_CA_FILE": str(extender.ca),
                "TOPOGANG_BARRIER_DIR": str(dirs["topogang"]),
                "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID": attempt,
                "FC_TASKROLE_NAME": "worker",
                "FC_TASK_INDEX": "0",
            },
        ),
    }
    try:

        def early() -> str | None:
            done = {k: b.proc.returncode for k, b in barriers.items() if not b.alive()}
            on_nodes = [n for n, p in pods_of(core, ns, expected).items() if p.node]
            if done or on_nodes:
                return f"barriers exited {done}; framework pods bound {on_nodes}"
            return None

        # Longer than the stock barrier's 5 s interval: each one has looked at least twice.
        hold_for("the gang cannot fit: no barrier may pass and no task pod may bind", early, 7)
        gang = extender.get(f"/v1/gangs/{ns}/{name}")
        assert gang["phase"] == "Pending" and gang["bound"] == 0, gang

        wait_gone(core, ns, delete_pods(core, ns, blocker))
        pods = wait_running(core, ns, expected)
        wait_until("every barrier to exit", lambda: not any(b.alive() for b in barriers.values()), 60)
        for k, b in barriers.items():
            assert b.proc.returncode == 0, f"{k} barrier exited {b.proc.returncode}:\n{b.log()[-3000:]}"
    finally:
        for b in barriers.values():
            b.stop()
        framework_controller.stop()
        try:
            custom.delete_namespaced_custom_object(FC_GROUP, FC_VERSION, ns, FC_PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    # One gang: every pod's bind info names the framework attempt's gang, under one rack.
    gangs = {yaml.safe_load(p.annotations[BIND_INFO])["gang"] for p in pods.values()}
    assert gangs == {f"{ns}/{name}/{attempt}"}
    rack = racks(e2e_cluster.env["TOPOLOGY"])
    assert len({rack[str(p.node)] for p in pods.values()}) == 1, {n: p.node for n, p in pods.items()}
    ledger = extender.get(f"/v1/gangs/{ns}/{name}")
    assert ledger["phase"] == "Ready" and ledger["expected"] == 3, ledger

    injectors = {k: (d / "injector.sh").read_text(encoding="utf-8") for k, d in dirs.items()}
    ips = {role: [str(pods[f"{name}-{role}-{i}"].ip) for i in range(n)] for role, n, _ in ROLES}
    assert injector_ips(injectors["proxy"]) == ips, injectors["proxy"]
    assert injectors["apiserver"] == injectors["proxy"]
    assert injectors["topogang"] == injectors["proxy"]
    for k in ("proxy", "topogang"):  # what the extender handed the barriers holds no pod template
        assert SECRET not in (dirs[k] / "framework.json").read_text(encoding="utf-8"), k
    assert SECRET in (dirs["apiserver"] / "framework.json").read_text(encoding="utf-8")  # the reference


def doors(extender: Extender, ns: str, name: str, token: str, core: client.CoreV1Api) -> None:
    """The task pod's token against the real API server's TokenReview: its own gang and Framework, and
    nothing else; a viewer's token reads the cluster-wide views, a plain one does not."""
    own = f"{extender.url}/v1/gangs/{ns}/{name}"
    framework_url = f"{extender.url}/apis/{FC_GROUP}/{FC_VERSION}/namespaces/{ns}/frameworks/{name}"
    status, doc = read_as(own, token)
    assert status == 200 and doc["name"] == name, (status, doc)
    status, doc = read_as(framework_url, token)
    assert status == 200 and SECRET not in json.dumps(doc), (status, doc)
    for url in (f"{extender.url}/v1/gangs/kube-system/{name}", f"{extender.url}/v1/gangs/{ns}/blocker"):
        status, doc = read_as(url, token)
        assert status == 403 and "may read only its own gang" in doc["Error"], (url, status, doc)
    assert read_as(own, None)[0] == 401
    assert read_as(f"{extender.url}/v1/inspect", token)[0] == 403
    viewer, plain = "topogang-e2e-viewer", "topogang-e2e-plain"
    service_account(core, ns, viewer)
    service_account(core, ns, plain)
    rbac = client.RbacAuthorizationV1Api(core.api_client)
    binding = {
        "metadata": {"name": f"{ns}-viewer"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "topogang-viewer",
        },
        "subjects": [{"kind": "ServiceAccount", "name": viewer, "namespace": ns}],
    }
    rbac.create_cluster_role_binding(client.V1ClusterRoleBinding.model_validate(binding))
    try:
        status, doc = read_as(f"{extender.url}/v1/inspect", token_for(core, ns, viewer))
        assert status == 200 and "gpus" in doc, (status, doc)
        assert read_as(f"{extender.url}/v1/inspect", token_for(core, ns, plain))[0] == 403
    finally:
        rbac.delete_cluster_role_binding(f"{ns}-viewer")
