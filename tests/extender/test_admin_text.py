"""A tenant's gang name reaching the admin's terminal or the extender's log. A gang's name is the
tenant's text (HiveD `affinityGroup.name` is any string); a name with a control character is refused
at filter (`identity.check_text`), and the admin's `topogang diff --against` report escapes names
(`config.untrusted.printable`) in case a reservation made before still carries one: an ESC sequence
in a name was executed by the admin's terminal (concealing the rest of the capacity-loss report,
moving the cursor and erasing lines, OSC 52 clipboard), and a newline forged log lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config.against import diff_against, format_running
from config.load import load_config
from extender.gangs.podspec import SPEC_ANNOTATIONS, pod_request
from tests.integration.conftest import CONFIG
from topology.decisions import UserError

GONE_NODE = "a100-r3-n4"
# conceal everything printed after it, then erase the line it is on
HOSTILE = "nlp/train\x1b[8m\r\x1b[2K"


def _groups(name: str) -> list[dict[str, object]]:
    """`GET /v1/inspect/affinitygroups` of a running extender: one gang on GONE_NODE."""
    return [
        {
            "metadata": {"name": name},
            "status": {
                "vc": "nlp",
                "priority": 10,
                "request": {"priority": 10},
                "state": "Allocated",
                "slots": [
                    {
                        "slot": 0,
                        "node": GONE_NODE,
                        "leafCellIndices": list(range(8)),
                        "podUID": "u0",
                        "podName": "p0",
                    }
                ],
            },
        }
    ]


def test_diff_against_prints_a_tenant_gang_name_without_terminal_control_characters(tmp_path: Path) -> None:
    text = CONFIG.read_text()
    assert f"cellAddress: {GONE_NODE}\n" in text
    no_node = tmp_path / "no-node.yaml"
    no_node.write_text(text.replace(f"cellAddress: {GONE_NODE}\n", "cellAddress: a100-r3-n5\n"))
    d = diff_against(load_config(CONFIG), _groups(HOSTILE), load_config(no_node), "running")
    assert [i["gang"] for i in d["runningGangs"]["losesGpus"]] == [HOSTILE]  # the gang is reported...
    out = "\n".join(format_running(d))
    # ...but the admin's terminal must get the name as text, not as commands
    assert "\x1b" not in out and "\r" not in out, repr(out)


@pytest.mark.parametrize(
    "name", ["x\x1b]52;c;cm0gLXJmIH4K\x07", "x\nCRITICAL topogang.extender: forged", "x\x9b2J"]
)
def test_a_gang_name_with_control_characters_is_refused(name: str) -> None:
    spec = {
        "virtualCluster": "nlp",
        "priority": 1,
        "leafCellNumber": 1,
        "affinityGroup": {"name": name, "members": [{"podNumber": 1, "leafCellNumber": 1}]},
    }
    pod = {"metadata": {"annotations": {SPEC_ANNOTATIONS[0]: json.dumps(spec)}}}
    with pytest.raises(UserError) as err:
        pod_request(pod, "u1", "nlp", "p0")
    assert err.value.field == "affinityGroup.name"


FORGED = "2026-01-01 00:00:00,000 CRITICAL topogang.extender: forged by a tenant"


def test_a_tenant_gang_name_cannot_forge_a_line_of_the_extender_log() -> None:
    """A tenant names its gang with a newline and a whole fake log line, lets the filter reserve
    it, then deletes the pod: the extender logs the release with the name as it is, and its log
    (plain text, `logging.basicConfig` in `extender.cli`) gains a line the extender never wrote."""
    import time

    from tests.integration.conftest import Pods, running_server
    from tests.ui import drive

    with running_server() as server, server.client(timeout=30.0) as client:
        names = drive.node_names(client)
        pods = Pods(client)
        pod = pods.make("forge", "nlp", drive.gang_spec("nlp/x\n" + FORGED, "nlp", 1, 8))
        r = client.post("/v1/extender/filter", json={"Pod": pod, "Nodes": None, "NodeNames": names})
        assert r.status_code == 200, r.text
        reserved = not r.json()["Error"]  # the filter took the name (a refusal is a fix, not a failure)
        r = client.delete(f"/v1/standalone/pods/{pod['metadata']['uid']}")
        assert r.status_code == 200, r.text
        if reserved:
            assert r.json()["releasedGang"], r.text
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not any("every pod deleted" in x for x in server.log):
                time.sleep(0.05)
            assert any("every pod deleted" in x for x in server.log), "".join(server.log[-20:])
        forged = [x for x in server.log if x.startswith(FORGED)]
        assert not forged, forged
