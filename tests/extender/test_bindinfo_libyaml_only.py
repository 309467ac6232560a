"""A tenant's bind-info annotation that libyaml refuses is refused without a pure-Python parse of it
(up to 256 KiB: ~1.7 s of the event loop per edit): bind info is read with libyaml alone."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from extender.gangs.bindinfo import decode_bind_info


def test_bind_info_libyaml_refuses_is_not_parsed_again_in_pure_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaders: list[Any] = []
    real = yaml.parse

    def parse(stream: Any, Loader: Any = yaml.SafeLoader) -> Any:  # noqa: N803 (PyYAML's name)
        loaders.append(Loader)
        return real(stream, Loader=Loader)

    monkeypatch.setattr(yaml, "parse", parse)
    with pytest.raises(ValueError):
        decode_bind_info("node: n1\naffinityGroupBindInfo:\n" + "- x: [a, b]\n" * 1000 + "- [\n")
    assert yaml.SafeLoader not in loaders or getattr(yaml, "CSafeLoader", None) is None, loaders
