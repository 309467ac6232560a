"""A gang's identity: (namespace, name), the namespace always the pod's own `metadata.namespace`.

Gang names are per namespace: two namespaces that both name a gang `train` have two gangs, and no
pod can join, squat, read or release a gang of another namespace by naming it. The pair is carried
as one string, the core's gang key `<namespace>/<name>` (the core treats gang names as opaque): a
namespace is a DNS label and has no `/`, so the key's first segment is the namespace and keys of two
namespaces never meet. The namespace is never a value a tenant writes: it comes from the pod object.

A name a tenant writes that already starts with its own namespace (`vision/train` in `vision`,
HiveD's habit) is taken as that same gang, so specs and bind info written before names were per
namespace keep naming the gangs they named; the same name in another namespace (`evil`) is
`evil/vision/train`, a gang of its own.

A pod with no affinity group is a one-pod gang named `pod:<pod name>`. Explicit names (an
`affinityGroup.name`, a convention's group name) may not take that form, so a one-pod gang cannot be
squatted even from inside its namespace. FrameworkController gangs are `<framework>/<attempt>` in the
framework's namespace, which must be the pod's (`podspec`).
"""

from __future__ import annotations

from topology.decisions import UserError

ONE_POD_PREFIX = "pod:"
# a gang key's longest honest form: a Workload API pod's `<ns>/<workload>/<podGroup>/<replicaKey>`,
# a namespace (63), a DNS subdomain (253) and two DNS labels (63 each), 445 with the slashes; a
# FrameworkController gang's `<ns>/<framework>/<attempt uid>` is shorter
MAX_KEY = 512


def check_text(value: str, field: str) -> None:
    """A name a tenant writes that topogang repeats (logs, Events, filter answers on every node,
    GangReservation objects): bounded, and printable, so it can neither forge a log line nor make
    every answer about it huge."""
    if len(value) > MAX_KEY:
        raise UserError(field, f"is {len(value)} characters long; names have at most {MAX_KEY}")
    if not value.isprintable():
        raise UserError(field, f"{value[:80]!r} holds a control character; names are printable text")


def gang_key(namespace: str, name: str) -> str:
    """The core's key of gang `name` of `namespace` (a name already qualified by that namespace is kept)."""
    _check_namespace(namespace)
    prefix = f"{namespace}/"
    return name if name.startswith(prefix) and len(name) > len(prefix) else prefix + name


def split_key(key: str) -> tuple[str, str]:
    """(namespace, name) of a gang key; ("", key) for a key with no namespace (none is made here)."""
    ns, sep, name = key.partition("/")
    return (ns, name) if sep and name else ("", key)


def one_pod_key(namespace: str, pod: str) -> str:
    """The key of a pod's own one-pod gang: a form no explicit name can take (`explicit_key`)."""
    _check_namespace(namespace)
    return f"{namespace}/{ONE_POD_PREFIX}{pod}"


def is_one_pod(key: str) -> bool:
    return split_key(key)[1].startswith(ONE_POD_PREFIX)


def explicit_key(namespace: str, name: str, field: str) -> str:
    """The key of a gang a tenant names (`field`: where the name was written, for the error): its
    namespace's, and never a one-pod gang's."""
    key = gang_key(namespace, name)
    check_text(key, field)
    if is_one_pod(key):
        raise UserError(
            field,
            f"gang name {name!r}: names starting with {ONE_POD_PREFIX!r} are reserved for one-pod gangs "
            "(a pod without an affinity group); choose another name",
        )
    return key


def _check_namespace(namespace: str) -> None:
    """A Kubernetes namespace is a DNS label: never empty, never with a `/` (which would let a
    request's namespace spell another namespace's keys)."""
    if not namespace or "/" in namespace:
        raise UserError("metadata.namespace", f"{namespace[:80]!r} is not a namespace")
