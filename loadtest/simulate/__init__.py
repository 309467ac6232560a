"""Trace-driven simulator and placement-quality report (`topogang simulate`).

`trace` reads a job trace, `cluster` builds the simulated clusters, `policies` wraps each scheduler
under test behind one interface, `engine` replays the trace in simulated time, `metrics` and
`report` turn the runs into numbers, goals, Markdown, plots and JSON, and `cli` ties them together.
"""
