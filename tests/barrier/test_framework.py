"""FrameworkBarrier's rules over a Framework object: readiness, injector text, compression."""

from __future__ import annotations

import base64
import copy
import gzip
from typing import Any

import orjson

from extender.gangs.framework import (
    barrier_passed,
    decompressed,
    injector,
    ready_counts,
    task_role_statuses,
    total_tasks,
    with_ips_hidden,
)


def framework(ips: dict[str, list[str | None]], numbers: dict[str, int] | None = None) -> dict[str, Any]:
    numbers = numbers or {r: len(v) for r, v in ips.items()}
    return {
        "apiVersion": "frameworkcontroller.microsoft.com/v1",
        "kind": "Framework",
        "metadata": {"name": "tf", "namespace": "ml"},
        "spec": {"taskRoles": [{"name": r, "taskNumber": n} for r, n in numbers.items()]},
        "status": {
            "attemptStatus": {
                "taskRoleStatuses": [
                    {
                        "name": r,
                        "taskStatuses": [
                            {"index": i, "attemptStatus": {"podIP": ip}} for i, ip in enumerate(v)
                        ],
                    }
                    for r, v in ips.items()
                ]
            }
        },
    }


def compress(f: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(f)
    att = out["status"]["attemptStatus"]
    att["taskRoleStatusesCompressed"] = base64.b64encode(
        gzip.compress(orjson.dumps(att.pop("taskRoleStatuses")))
    )
    att["taskRoleStatusesCompressed"] = att["taskRoleStatusesCompressed"].decode()
    return out


# FrameworkBarrier's documented output for a Framework with roles ps (1 task) and worker (2 tasks):
# a shebang, an echo, one IPS export+echo per role in status order, then one ADDRESSES export+echo per
# role, then a closing echo; blank lines between the blocks.
EXPECTED = """#!/bin/bash

echo ./injector.sh: Start to inject environment variables

export FB_PS_IPS=10.0.0.1
echo FB_PS_IPS=${FB_PS_IPS}
export FB_WORKER_IPS=10.0.0.2,10.0.0.3
echo FB_WORKER_IPS=${FB_WORKER_IPS}

export FB_PS_ADDRESSES=10.0.0.1:${FB_PS_PORT}
echo FB_PS_ADDRESSES=${FB_PS_ADDRESSES}
export FB_WORKER_ADDRESSES=10.0.0.2:${FB_WORKER_PORT},10.0.0.3:${FB_WORKER_PORT}
echo FB_WORKER_ADDRESSES=${FB_WORKER_ADDRESSES}

echo ./injector.sh: Succeeded to inject environment variables
"""


def test_injector_matches_frameworkbarrier_byte_for_byte() -> None:
    f = framework({"ps": ["10.0.0.1"], "worker": ["10.0.0.2", "10.0.0.3"]})
    assert injector(f) == EXPECTED
    assert injector(compress(f)) == EXPECTED


def test_injector_without_status_is_just_the_shebang() -> None:
    f = framework({"ps": ["1.1.1.1"]})
    del f["status"]
    assert injector(f) == "#!/bin/bash\n"


def test_readiness_counts_pod_ips_and_ignores_deletion_pending() -> None:
    f = framework({"ps": ["10.0.0.1"], "worker": ["10.0.0.2", None]})
    assert ready_counts(f) == (2, 3) and not barrier_passed(f)
    f["status"]["attemptStatus"]["taskRoleStatuses"][1]["taskStatuses"][1]["attemptStatus"]["podIP"] = (
        "10.0.0.3"
    )
    assert barrier_passed(f)
    f["status"]["attemptStatus"]["taskRoleStatuses"][1]["taskStatuses"][0]["deletionPending"] = True
    assert not barrier_passed(f)


def test_status_beyond_spec_is_not_counted() -> None:
    f = framework({"worker": ["10.0.0.2", "10.0.0.3", "10.0.0.4"]}, numbers={"worker": 2})
    assert total_tasks(f) == 2 and ready_counts(f) == (2, 2)
    assert "10.0.0.4" not in injector(f)


def test_compressed_statuses_are_read_and_decompressed() -> None:
    f = framework({"worker": ["10.0.0.2"]})
    c = compress(f)
    assert task_role_statuses(c) == task_role_statuses(f)
    assert decompressed(c)["status"] == f["status"]


def test_hiding_ips_keeps_the_shape_including_compression() -> None:
    f = framework({"worker": ["10.0.0.2", "10.0.0.3"]})
    hidden = with_ips_hidden(compress(f), keep={("worker", 1)})
    assert "taskRoleStatusesCompressed" in hidden["status"]["attemptStatus"]
    statuses = task_role_statuses(hidden)
    assert statuses is not None
    assert [t["attemptStatus"]["podIP"] for t in statuses[0]["taskStatuses"]] == [None, "10.0.0.3"]
    assert not barrier_passed(hidden)
    assert with_ips_hidden(f, None) is f
