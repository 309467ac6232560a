"""The replay's job lines count in English: `1 pod x 1 GPU`, not `1 pods x 1 GPUs`."""

from __future__ import annotations

from extender.replay import pods_times_gpus


def test_singular_and_plural() -> None:
    assert pods_times_gpus([1]) == "1 pod x 1 GPU"
    assert pods_times_gpus([8]) == "1 pod x 8 GPUs"
    assert pods_times_gpus([8, 8, 8, 8]) == "4 pods x 8 GPUs"
    assert pods_times_gpus([2, 1]) == "2 pods: 2+1 GPUs"
