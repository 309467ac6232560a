"""An in-memory Kubernetes API server, and a client for it with the `AsyncKube` interface: the one
fake of the Kubernetes API for every test (the soak's, and the Kubernetes-mode service's own).

`FakeApiServer` stores any object by its path, the way the real API server's generic registry
does, so a resource the extender starts using (a custom resource such as
`/apis/topogang.io/v1alpha1/namespaces/{ns}/gangreservations/{name}`, a Lease) works without
changes here:

- paths `/api/v1[/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]` and
  `/apis/{group}/{version}[/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]`;
- one resourceVersion counter for everything (etcd's revision), stamped on every write;
- GET of an object (404 -> None, as `KubeApi.request` answers), of a collection (`items` and the
  list's resourceVersion; equality label and field selectors), POST to a collection (409
  AlreadyExists; `generateName`), PUT and merge-PATCH (409 Conflict on a stale resourceVersion or
  another UID; `/status` changes only the status), DELETE (409 on a failed UID or resourceVersion
  precondition);
- pods as the real server treats them: DELETE of a pod bound to a node only marks it
  (`deletionTimestamp`) until the kubelet lets it go (`finalize`), unless it already finished or
  `gracePeriodSeconds` is 0; `pods/{name}/binding` sets `spec.nodeName` and merges the Binding's
  annotations into the pod (409 when the UID differs or the pod is already bound or being
  deleted); `pods/{name}/eviction` deletes;
- TokenReview and SubjectAccessReview as the real server answers them, from tokens and grants a test
  sets (`add_token`, `pod_token`, `grant`): a token is valid for the audiences it was issued with
  (the server's own, "", when none), a pod-bound token's user carries the pod's name and UID in
  `extra`, and a review is allowed when the user or one of its groups has the grant;
- Events are counted, and only the latest 200 kept (a soak would otherwise keep every one);
- watches fed from a change log: a watch from a resourceVersion older than the log's start (after
  `compact`) fails with 410 Gone; `resourceVersion` "" or "0" starts with the current objects; a
  watch ends cleanly after `watch_seconds`, as the client's `timeoutSeconds` makes the server end it.

`put`, `at` and `forget` set and read the scene directly, for tests. `FakeKube` is one process's
connection to the server (`record` keeps every request for a test to read): every call goes
through its fault injection first (`Fault`: an error status, a timeout before or after the server
applied the request, a delay), its watches can be cut mid-stream (`cut_watches`) or ended the way
the server's own timeout ends them (`end_watches`), and `close` drops everything, as a process
dying would. Time is the event loop's (`asyncio.sleep` for delays and watch lag), which is virtual in
the soak.
"""

from loadtest.kubefake.client import ConnectionClosedError, FakeKube, Fault
from loadtest.kubefake.objects import Obj, Ref, matches, merge_patch, parse_path
from loadtest.kubefake.server import FakeApiServer, WatchStream

__all__ = [
    "ConnectionClosedError",
    "FakeApiServer",
    "FakeKube",
    "Fault",
    "Obj",
    "Ref",
    "WatchStream",
    "matches",
    "merge_patch",
    "parse_path",
]
