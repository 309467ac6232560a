"""The extender service: kube-scheduler's HTTP verbs over the scheduling core, and its Kubernetes edge.

    wire        the extender protocol's JSON: typed requests in, PascalCase replies out
    podspec     the pod contract: opt-in, HiveD's scheduling spec, FrameworkController identity
    bindinfo    the annotations a Binding writes (GPU indices, the gang's placement)
    verbs       filter / prioritize / preempt / bind against `topology.core.Core`, under one lock
    views       HiveD-shaped inspect documents and usage numbers read from the core
    metrics     Prometheus instruments (a private registry per app)
    app         the starlette routes
    ui/         the cluster view at /ui: a static page (static/) and its JSON, GET /v1/ui/state
    standalone  an in-memory binder: the service on a config file, no cluster
    kube/       list+watch of pods and nodes, Bindings, recovery, events (Kubernetes mode)
    cli         `topogang serve`;  replay: `topogang replay`;  demo: `topogang demo`
    ledger      the gang ledger's phases (Pending ... Ready, Broken, Expired) from the core and the edge
    ledger_api  GET /v1/gangs (long-poll) and the Framework proxy for the stock FrameworkBarrier
    barrier     `topogang barrier`, the FrameworkBarrier drop-in;  framework: FrameworkController rules

Data flows one way: request -> wire -> verbs -> core decision -> wire reply (and the Binding).
"""
