"""The YAML limits (alias expansion, nesting) hold for text libyaml refuses but PyYAML's pure-Python
loader reads, such as a lone surrogate escape ("\\ud800"): `check_yaml` walks such text as that
loader sees it. Before, one such line turned every limit off."""

from __future__ import annotations

import pytest

from config.load import ConfigError, load_config_text
from config.untrusted import CONFIG_LIMITS, UntrustedError, check_yaml
from extender.standalone import EXAMPLE_CONFIG

BASE = EXAMPLE_CONFIG.read_text(encoding="utf-8")
SURROGATE = 'x-note: "\\ud800"\n'  # libyaml: "found invalid Unicode character escape code"


def _bomb(levels: int) -> str:
    lines = ["x-l0: &l0 [x,x,x,x,x,x,x,x,x,x]"]
    lines += [f"x-l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


PAIR = 'x-note: "\\ud83d\\ude00"\n'  # a surrogate pair: libyaml refuses it, the pure-Python parser reads it


def test_an_alias_bomb_behind_a_surrogate_pair_is_still_counted() -> None:
    # 10^12 nodes: without the escape this is refused at once by libyaml's walk; behind it, only the
    # walk as the pure-Python parser reads it counts the expansion (load_config_text once walked it
    # for hours)
    with pytest.raises(UntrustedError, match="expands to more than"):
        check_yaml(PAIR + _bomb(12) + BASE, CONFIG_LIMITS, pure=True)


def test_an_alias_bomb_behind_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(UntrustedError):  # the surrogate itself, before the expansion
        check_yaml(SURROGATE + _bomb(12) + BASE, CONFIG_LIMITS, pure=True)


def test_deep_nesting_behind_a_lone_surrogate_is_a_config_error_not_a_recursion_error() -> None:
    text = SURROGATE + "x-deep: " + "[" * 50_000 + "]" * 50_000 + "\n" + BASE
    with pytest.raises(ConfigError) as err:  # was: RecursionError (a traceback from `topogang serve`)
        load_config_text(text, "c.yaml")
    assert str(err.value).startswith("c.yaml: x-note: ")


def test_a_vc_named_with_a_lone_surrogate_is_refused() -> None:
    # it loaded as valid; the VC name then cannot be encoded: /metrics and /v1/inspect fail on it
    text = BASE.replace("  research:  ", '  "res\\ud800earch":  ').replace(
        "    research: research\n", '    research: "res\\ud800earch"\n'
    )
    with pytest.raises(ConfigError) as err:
        load_config_text(text, "c.yaml")
    assert "c.yaml: virtualClusters" in str(err.value) and "Unicode" in str(err.value)
