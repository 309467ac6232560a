"""A pool published in several ResourceSlices that name one device twice (the API server checks
names only within one slice; kube-scheduler's allocator calls such a pool invalid) is a mismatch: it
must not map two GPUs of the cell tree onto one device, each allocated to a different pod, which the
node's driver would both hand the same GPU."""

from __future__ import annotations

from extender.dra.devices import DeviceMap, Mismatch
from tests.dra.test_devices import NODE, gpu_slice, mapped


def test_a_pool_that_names_one_device_twice_is_a_mismatch() -> None:
    a = gpu_slice(n=8, generation=1, count=2, name="a")
    b = gpu_slice(n=8, generation=1, count=2, name="b")
    # slice a publishes gpu-0..gpu-3, slice b publishes gpu-0..gpu-3 again, with other bus ids
    a["spec"]["devices"] = a["spec"]["devices"][:4]
    b["spec"]["devices"] = b["spec"]["devices"][4:]
    for i, d in enumerate(b["spec"]["devices"]):
        d["name"] = f"gpu-{i}"
    got = mapped(a, b)
    if isinstance(got, DeviceMap):
        names = [(d.pool, d.name) for d in got.by_gpu.values()]
        twice = sorted({n for n in names if names.count(n) > 1})
        raise AssertionError(f"GPUs of {NODE} mapped onto one device: {twice}")
    assert isinstance(got, Mismatch)
