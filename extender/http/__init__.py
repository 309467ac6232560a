"""The HTTP surface and kube-scheduler's four verbs.

`app` routes requests; `httpproto` reads bodies within their limits and answers malformed HTTP;
`wire` parses the extender protocol's requests (with `nodelists`, the node lists kept from request to
request) and `replies` writes its answers; `verbs` is the `Scheduler`, which holds the core and answers
filter, prioritize, preempt and bind, with `podrequests` (reading a pod's gang request), `podcache`
(requests kept by pod UID for bind), `promises` (slots held for the pod sent to them), `answers` (what
the verbs say) and `ports` (what it is given to reach the world: binder, lookups, evictor). `views`,
`explain_api` and `ledger_api` serve the read-only documents: inspect, what-if, the gang ledger.
"""
