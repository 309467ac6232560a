"""Hostile input against a real standalone extender, over every route (issue 23, item 6).

`hostile` builds the requests and checks every reply; `tests/integration/test_fuzz.py` drives it from
hypothesis in the suite, and `python -m tests.fuzz` (`make fuzz`) drives it longer from a seed.
"""
