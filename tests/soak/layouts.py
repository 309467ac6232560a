"""The admin editing the cells while tenants run (`Options.cells`, `--cells`): the example cluster's
hardware and quotas rewritten to one of `LAYOUTS` and hot-reloaded by the extender's own watcher.

The edits are the ones a platform team makes: a VC given one more node, one VC shrunk while another
grows (running gangs may lose their guarantee: the reload is refused until confirmed), a fourth rack
added (its nodes joined Kubernetes before the admin described them), and a rack taken out for
repair, its nodes gone from the topology while its pods may still run (refused until confirmed;
when it comes back, what still runs there must be held again before anything else is placed on
it). A refused edit stays on disk: the soak confirms some (the digest the refusal names, as an
admin does) and leaves others, so a restart reads the file as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable

RACK4 = """  - cellType: A100-RACK           # rack 4
    cellChildren:
    - cellAddress: a100-r4-n1
    - cellAddress: a100-r4-n2
    - cellAddress: a100-r4-n3
    - cellAddress: a100-r4-n4
"""
VIRTUAL = "\n# --- Virtual clusters"


def _nlp_nodes(text: str, n: int) -> str:
    return re.sub(
        r"(  nlp:.*\n    virtualCells:\n    - cellType: A100-RACK.A100-NODE\n      cellNumber: )\d+",
        rf"\g<1>{n}",
        text,
    )


def _vision_nodes(text: str, n: int) -> str:
    return re.sub(
        r"(  vision:.*\n(?:.*\n)*?    - cellType: A100-RACK.A100-NODE\n      cellNumber: )\d+",
        rf"\g<1>{n}",
        text,
        count=1,
    )


def _research_halves(text: str, n: int) -> str:
    return re.sub(r"(cellType: A100-RACK.A100-NODE.A100-HALF\n      cellNumber: )\d+", rf"\g<1>{n}", text)


def _add_rack(text: str) -> str:
    head, sep, tail = text.partition(VIRTUAL)
    return head.rstrip("\n") + "\n" + RACK4 + sep + tail


def without_rack(text: str, rack: int) -> str:
    """Rack `rack` (1-3) out for repair; vision and nlp down to the 8 nodes left (vision's rack and
    one more node, nlp's one node, research's two nodes of halves)."""
    text = re.sub(rf"  - cellType: A100-RACK +# rack {rack}\b.*\n(    .*\n)+", "", text)
    return _nlp_nodes(_vision_nodes(text, 1), 1)


# (name, edit of the example config's text); the first is the config the soak starts with
LAYOUTS: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("as shipped", lambda t: t),
    ("nlp one node more", lambda t: _nlp_nodes(t, 4)),
    ("nlp shrunk, research grown", lambda t: _research_halves(_nlp_nodes(t, 2), 6)),
    ("a fourth rack", _add_rack),
    ("rack 3 out for repair", lambda t: without_rack(t, 3)),
)


def layout_text(base: str, layout: int) -> str:
    return LAYOUTS[layout][1](base)


def every_node(base: str) -> list[str]:
    """The nodes of every layout: what the API server has from the start."""
    names = {n for i in range(len(LAYOUTS)) for n in re.findall(r"cellAddress: (\S+)", layout_text(base, i))}
    return sorted(names)
