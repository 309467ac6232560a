"""Every object in examples/*.yaml is accepted by the e2e API server in a server-side dry run with strict
field validation (`dryRun=All`, `fieldValidation=Strict`: an unknown or mistyped field is refused, and
nothing is stored), so the files a tenant copies stay valid against real schemas.

The schemas come from where each API lives:
- Pod, Job, and Kubernetes' own PodGroup (scheduling.k8s.io/v1beta1): built into kube-apiserver v1.37
  (the e2e turns the beta group on, scripts/e2e/versions.sh);
- JobSet and Volcano's PodGroup: their upstream CRDs, taken at test time from the Go modules pinned in
  MODULE_CRDS (`go mod download` keeps them in Go's module cache, so only the first run fetches them);
- FrameworkController's Framework: the CRD frameworkcontroller installs itself (its binary is run
  until the CRD is served, as tests/e2e/test_framework.py does);
- the coscheduling PodGroup (scheduler-plugins): the reduced CRD the e2e already applies
  (tests/e2e/manifests/podgroup-crd.yaml; it types the fields topogang reads).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from extender.kube.client import ApiError, KubeApi
from tests.e2e.conftest import REPO, E2ECluster, Process, fc_binary, go_binary, ignore_conflict
from tests.e2e.helpers import wait_until

pytestmark = pytest.mark.e2e

EXAMPLES = REPO / "examples"
# (group, kind) -> (Go module, version, CRD file in the module). Versions: the newest the Go module proxy
# serves (volcano.sh/volcano: v1.10.0; newer tags are refused by the filtered mirror).
MODULE_CRDS = {
    ("jobset.x-k8s.io", "JobSet"): (
        "sigs.k8s.io/jobset",
        "v0.12.0",
        "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",
    ),
    ("scheduling.volcano.sh", "PodGroup"): (
        "volcano.sh/volcano",
        "v1.10.0",
        "config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml",
    ),
}
COSCHEDULING_CRD = REPO / "tests" / "e2e" / "manifests" / "podgroup-crd.yaml"
FRAMEWORK = ("frameworkcontroller.microsoft.com", "Framework")
# Kinds whose CRD keeps unknown fields under `spec` (x-kubernetes-preserve-unknown-fields): the e2e's reduced
# coscheduling CRD, which types only the fields topogang reads. A strict dry run checks those, and the name.
LENIENT = {("scheduling.x-k8s.io", "PodGroup")}


def example_docs() -> list[tuple[str, dict[str, Any]]]:
    """(file#index, object) for every object of every example."""
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if doc:
                out.append((f"{path.name}#{i}", doc))
    return out


def group_kind(doc: dict[str, Any]) -> tuple[str, str]:
    return str(doc["apiVersion"]).rpartition("/")[0], str(doc["kind"])


def module_file(module: str, version: str, path: str) -> Path:
    """A file of a Go module, downloaded into Go's module cache on first use."""
    go = go_binary()
    assert go is not None, "the e2e runs only with a Go toolchain"
    got = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "GO111MODULE": "on"},
    )
    info = json.loads(got.stdout or "{}")
    if got.returncode != 0 or info.get("Error") or not info.get("Dir"):
        pytest.fail(f"go mod download {module}@{version}: {info.get('Error') or got.stderr}", pytrace=False)
    file = Path(info["Dir"]) / path
    assert file.is_file(), f"{module}@{version} has no {path}"
    return file


def install_crd(cluster: E2ECluster, doc: dict[str, Any]) -> None:
    ext = client.ApiextensionsV1Api(cluster.api)
    ignore_conflict(ext.create_custom_resource_definition, doc)

    def established() -> bool:
        crd: Any = ext.read_custom_resource_definition(doc["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

    wait_until(f"CRD {doc['metadata']['name']} established", established, 60)


def framework_crd(cluster: E2ECluster, work: Path) -> None:
    """frameworkcontroller installs the Framework CRD when it starts; run it until the CRD is served."""
    custom = client.CustomObjectsApi(cluster.api)

    def served() -> bool:
        try:
            custom.list_cluster_custom_object(FRAMEWORK[0], "v1", "frameworks")
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    if served():
        return
    binary = fc_binary(cluster, "frameworkcontroller")
    (work / "frameworkcontroller.yaml").write_text(
        yaml.safe_dump({"kubeConfigFilePath": str(cluster.kubeconfig)}), encoding="utf-8"
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work)}
    fc = Process(
        "frameworkcontroller", [str(binary)], cluster.workdir / "logs" / "fc-crd.log", cwd=work, env=env
    )
    try:
        wait_until("frameworkcontroller to install the Framework CRD", lambda: served() or not fc.alive(), 60)
        assert served(), f"frameworkcontroller exited (rc={fc.proc.returncode}):\n{fc.log()[-3000:]}"
    finally:
        fc.stop()


@dataclass
class Schemas:
    api: KubeApi
    missing: dict[tuple[str, str], str]  # (group, kind) -> why its CRD is not there (the case skips)

    def need(self, doc: dict[str, Any]) -> None:
        why = self.missing.get(group_kind(doc))
        if why is not None:
            pytest.skip(why)


@pytest.fixture(scope="module")
def schemas(e2e_cluster: E2ECluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Schemas]:
    """Every CRD the examples need installed, and the namespaces they name; an API client."""
    for module, version, path in MODULE_CRDS.values():
        install_crd(
            e2e_cluster, yaml.safe_load(module_file(module, version, path).read_text(encoding="utf-8"))
        )
    install_crd(e2e_cluster, yaml.safe_load(COSCHEDULING_CRD.read_text(encoding="utf-8")))
    missing = {}
    try:  # frameworkcontroller is optional in the e2e build: only the Framework case skips without it
        framework_crd(e2e_cluster, tmp_path_factory.mktemp("fc"))
    except pytest.skip.Exception as skipped:
        missing[FRAMEWORK] = str(skipped)
    core = e2e_cluster.core
    made = []
    for ns in sorted({d["metadata"].get("namespace") for _, d in example_docs()} - {None}):
        try:
            core.create_namespace(client.V1Namespace.model_validate({"metadata": {"name": ns}}))
            made.append(ns)
        except ApiException as exc:
            if exc.status != 409:
                raise
    yield Schemas(KubeApi(e2e_cluster.api), missing)
    for ns in made:
        core.delete_namespace(ns)


def dry_run(cluster: E2ECluster, api: KubeApi, doc: dict[str, Any]) -> dict[str, Any] | None:
    """POST the object with dryRun=All and strict field validation; the API server's answer."""
    dyn = DynamicClient(cluster.api)  # type: ignore[no-untyped-call]
    resource: Any = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    path = (
        resource.path(namespace=doc["metadata"].get("namespace")) if resource.namespaced else resource.path()
    )
    return api.request("POST", path, [("dryRun", "All"), ("fieldValidation", "Strict")], doc)


@pytest.mark.parametrize(("where", "doc"), example_docs(), ids=[w for w, _ in example_docs()])
def test_every_example_passes_a_strict_server_side_dry_run(
    e2e_cluster: E2ECluster, schemas: Schemas, where: str, doc: dict[str, Any]
) -> None:
    schemas.need(doc)
    got = dry_run(e2e_cluster, schemas.api, doc)
    assert got is not None and got["kind"] == doc["kind"], where
    assert got["metadata"]["name"] == doc["metadata"]["name"], where


def test_nothing_was_stored(e2e_cluster: E2ECluster, schemas: Schemas) -> None:
    for where, doc in example_docs():
        if group_kind(doc) in schemas.missing:
            continue
        dyn = DynamicClient(e2e_cluster.api)  # type: ignore[no-untyped-call]
        resource: Any = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        with pytest.raises(ApiException) as err:
            resource.get(name=doc["metadata"]["name"], namespace=doc["metadata"].get("namespace"))
        assert err.value.status == 404, where


def test_a_broken_example_is_refused(e2e_cluster: E2ECluster, schemas: Schemas) -> None:
    """The check can fail: an unknown field under `spec` is refused for every kind whose schema types
    its spec (all but LENIENT's), and a mistyped metadata for every kind."""
    refused_unknown = set()
    docs = [(w, d) for w, d in example_docs() if group_kind(d) not in schemas.missing]
    for where, doc in docs:
        bad = copy.deepcopy(doc)
        bad["spec"]["notAField"] = True
        try:
            dry_run(e2e_cluster, schemas.api, bad)
        except ApiError as err:
            assert err.status in (400, 422) and "notAField" in err.message, (where, err.message)
            refused_unknown.add(group_kind(doc))
        bad = copy.deepcopy(doc)
        bad["metadata"]["labels"] = ["not", "a", "map"]
        with pytest.raises(ApiError) as typed:
            dry_run(e2e_cluster, schemas.api, bad)
        assert typed.value.status in (400, 422), where
    kinds = {group_kind(d) for _, d in docs}
    assert refused_unknown == kinds - LENIENT
