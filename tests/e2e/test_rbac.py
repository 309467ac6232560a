"""The session's extender runs as its own ServiceAccount under deploy/rbac.yaml (tests/e2e/conftest.py),
so every other e2e test is also a check that those rules cover what the extender does. This one checks
the other half: the account is who it claims to be, and it may do nothing beyond its rules."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes import config as kube_config

from tests.e2e.conftest import EXTENDER_ACCOUNT, E2ECluster, Extender

pytestmark = pytest.mark.e2e

# (verb, group, resource, subresource): what the extender's code calls, then what it must not be able to
NEEDED = [
    ("watch", "", "pods", ""),
    ("delete", "", "pods", ""),
    ("patch", "", "pods", ""),  # a promoted gang's bind info; the requeue mark on a pod turned away
    ("create", "", "pods", "binding"),
    ("patch", "", "pods", "status"),  # the DisruptionTarget condition on a pod topogang ends
    ("watch", "", "nodes", ""),
    ("create", "", "events", ""),
    ("get", "scheduling.x-k8s.io", "podgroups", ""),
    ("get", "scheduling.volcano.sh", "podgroups", ""),
    ("get", "frameworkcontroller.microsoft.com", "frameworks", ""),
    ("create", "authentication.k8s.io", "tokenreviews", ""),  # the doors: who a reader is
    ("create", "authorization.k8s.io", "subjectaccessreviews", ""),  # and whether it may
]
# in its own namespace only: durable reservations and the leader-election Lease
OWN = [
    ("list", "topogang.io", "gangreservations", ""),
    ("create", "topogang.io", "gangreservations", ""),
    ("update", "topogang.io", "gangreservations", ""),
    ("delete", "topogang.io", "gangreservations", ""),
    ("create", "coordination.k8s.io", "leases", ""),
]
DENIED = [
    ("create", "", "pods", ""),
    ("update", "", "pods", ""),
    ("patch", "", "nodes", ""),
    ("list", "", "secrets", ""),
    ("create", "", "pods", "eviction"),
    ("update", "scheduling.x-k8s.io", "podgroups", ""),
]


def test_the_extender_is_its_service_account_with_only_its_rbac_rights(
    e2e_cluster: E2ECluster, extender: Extender
) -> None:
    if extender.kubeconfig == e2e_cluster.kubeconfig:
        pytest.skip("TOPOGANG_E2E_EXTENDER_ADMIN=1: the extender runs with the admin's certificate")
    api = kube_config.new_client_from_config(config_file=str(extender.kubeconfig))  # type: ignore[no-untyped-call]
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview.model_validate({})
    )
    ns, account = EXTENDER_ACCOUNT
    assert review.status is not None and review.status.user_info is not None
    assert review.status.user_info.username == f"system:serviceaccount:{ns}:{account}"

    authz = client.AuthorizationV1Api(api)

    def allowed(verb: str, group: str, resource: str, sub: str, namespace: str = "e2e-any") -> bool:
        attrs = {
            "verb": verb,
            "group": group,
            "resource": resource,
            "subresource": sub,
            "namespace": namespace,
        }
        got = authz.create_self_subject_access_review(
            client.V1SelfSubjectAccessReview.model_validate({"spec": {"resourceAttributes": attrs}})
        )
        return bool(got.status and got.status.allowed)

    assert [r for r in NEEDED if not allowed(*r)] == []
    assert [r for r in DENIED if allowed(*r)] == []
    assert [r for r in OWN if not allowed(*r, namespace=ns)] == []
    assert [r for r in OWN if allowed(*r)] == [], "reservations and the Lease only in its own namespace"
