"""The Kubernetes edge: list+watch of pods and nodes, Bindings, recovery, events.

Pure parts (`nodes`, `pods`, `recovery`) work on plain dicts and are unit-tested without a cluster;
`client` is the only module that does I/O, always in threads, never on the event loop.
"""
