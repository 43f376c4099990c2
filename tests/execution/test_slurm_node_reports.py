"""What the real local Slurm (scripts/slurm.sh) reports of its nodes enters what the brain sees
free on the site's node pool: with one of its two nodes drained, a gang of both nodes is not
placed while a gang of one is, and a second gang of one is not while the first holds the
node in service, running or not yet; once the node is back, the gang of both is placed and
runs. A GPU that a fraction's shards run on is not free, and is reported shared with the
shards its jobs leave. A site whose scheduler cannot be reached is
told once and has no report."""

import asyncio
import logging
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from cnbrain.regional.node_reports import NodeReports
from tests.execution.execution_brain import (
    SLURM,
    Brain,
    cancel_every_job,
    job_request,
    running_brain,
    site_registration,
)
from tests.execution.local_slurm import CREDENTIALS, TOKEN_FILE, start_slurm
from tests.polling import until

pytestmark = pytest.mark.asyncio(loop_scope="module")

SITE = "AA-slurm-pool"
POOL = {
    "name": "gpu",
    "count": 2,
    "cpu_cores": 2,
    "memory_gib": 9,
    "accelerator": "A100",
    "accelerators": 4,
}
"""The local Slurm's two nodes: 2 CPUs, 9642 MiB and 4 GPUs (type "fake") each."""
DRAINED = "node2"
REPORT_INTERVAL_S = 1.0
"""How often the brain reads the node lists by itself (the sites are registered after it
starts, so its first read finds none)."""
UNREACHABLE_SITE = "AA-slurm-gone"
UNREACHABLE = "http://127.0.0.1:9"
"""A Slurm site with the same pool whose scheduler cannot be reached (nothing listens there)."""


def scontrol_update(state: str, *, check: bool = True) -> None:
    subprocess.run(
        ["scontrol", "update", f"nodename={DRAINED}", f"state={state}", "reason=cnbrain test"],
        check=check,
        capture_output=True,
        timeout=30,
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def brain(tmp_path_factory: Any) -> AsyncIterator[Brain]:
    start_slurm()
    registration = site_registration(
        SITE, execution=SLURM, cores=4, memory_gib=18, a100=8, labels={"pools": "yes"}
    )
    registration["site"]["node_pools"] = [POOL]
    gone = site_registration(
        UNREACHABLE_SITE,
        execution={**SLURM, "url": UNREACHABLE, "credential": "slurm-down"},
        cores=4,
        memory_gib=18,
        a100=8,
    )
    gone["site"]["node_pools"] = [POOL]
    down = {"url": UNREACHABLE, "token_file": str(TOKEN_FILE)}
    credentials = {**CREDENTIALS, "slurm-down": down}
    async with running_brain(
        tmp_path_factory.mktemp("slurm-nodes"),
        credentials=credentials,
        node_report_interval_s=REPORT_INTERVAL_S,
    ) as running:
        await running.register_site(registration)
        await running.register_site(gone)
        try:
            yield running
        finally:
            scontrol_update("resume", check=False)  # refused when it is not drained
            await cancel_every_job(running)


def gang(nodes: int) -> dict[str, Any]:
    resources = {
        "cpu": 1,
        "memory_gib": 0.25,
        "nodes": nodes,
        "accelerator": {"model": "A100", "count": 4},
    }
    return job_request(SITE, resources=resources, duration_hours=0.05)


async def reported(brain: Brain, nodes_by_free: list[int]) -> None:
    """Read the site's node list until its pool's report is `nodes_by_free` (Slurm may take a
    moment to show a change of a node's state)."""

    async def probe() -> bool | None:
        await brain.dispatcher.node_reports.run_once()
        return True if await pool_report(brain) == nodes_by_free else None

    await until(probe, f"the report {nodes_by_free}", every_s=0.5)


async def pool_report(brain: Brain) -> list[int] | None:
    """What the brain shows of SITE's pool as its scheduler reported it (None: no report)."""
    view = (await brain.as_admin("GET", f"/v1/sites/{SITE}/nodes")).json()
    found: list[int] | None = view["pools"][0]["reported_nodes_by_free"]
    return found


async def test_the_running_brain_reads_its_slurm_sites_reports_by_itself(brain: Brain) -> None:
    found = await until(lambda: pool_report(brain), "the brain's own read", timeout_s=10)
    assert found == [0, 0, 0, 0, 2]


async def test_a_drained_node_keeps_a_gang_of_both_nodes_off_the_site(brain: Brain) -> None:
    _, user = await brain.tenant_user("drained")
    await reported(brain, [0, 0, 0, 0, 2])
    scontrol_update("drain")
    await reported(brain, [1, 0, 0, 0, 1])

    both = await brain.call(user, "POST", "/v1/requests", json=gang(2))
    assert both.status_code == 201, both.text
    assert both.json()["state"] == "rejected"
    assert "at most 1 such nodes free (AA-slurm-pool)" in both.json()["reason"]
    one = await brain.submit(user, gang(1))
    assert one["state"] == "placed" and one["site"] == SITE
    seen = await brain.states_until(user, one["id"], "completed", "failed", timeout_s=60)
    assert seen[-1] == "completed", seen

    scontrol_update("resume")
    await reported(brain, [0, 0, 0, 0, 2])
    made = await brain.submit(user, gang(2))
    assert made["state"] == "placed" and made["site"] == SITE
    seen = await brain.states_until(user, made["id"], "completed", "failed", timeout_s=60)
    assert seen[-1] == "completed", seen
    await brain.invariants()


async def test_a_gang_not_yet_running_and_a_drained_node_do_not_hide_each_other(
    brain: Brain,
) -> None:
    _, user = await brain.tenant_user("unshown")
    await reported(brain, [0, 0, 0, 0, 2])
    scontrol_update("drain")
    try:
        await reported(brain, [1, 0, 0, 0, 1])
        first = await brain.submit(user, gang(1))
        assert first["state"] == "placed" and first["site"] == SITE
        # The brain's nodes have one free; the report has one, which the first gang takes
        # whether or not its job runs yet: the second is not placed.
        second = await brain.call(user, "POST", "/v1/requests", json=gang(1))
        assert second.status_code == 201, second.text
        assert second.json()["state"] == "rejected"
        assert "at most 0 such nodes free (AA-slurm-pool)" in second.json()["reason"]
        seen = await brain.states_until(user, first["id"], "completed", "failed", timeout_s=60)
        assert seen[-1] == "completed", seen
    finally:
        scontrol_update("resume")
    await reported(brain, [0, 0, 0, 0, 2])
    await brain.invariants()


async def test_a_running_gang_that_the_report_shows_counts_once(brain: Brain) -> None:
    _, user = await brain.tenant_user("shown")
    await reported(brain, [0, 0, 0, 0, 2])
    long_gang = {**gang(1), "job": {"command": "sleep 60", "max_attempts": 1}}
    first = await brain.submit(user, long_gang)
    assert first["state"] == "placed" and first["site"] == SITE
    await brain.states_until(user, first["id"], "running", timeout_s=60)
    await reported(brain, [1, 0, 0, 0, 1])
    # The report shows the first gang's node taken, and the brain's take is that job's: the
    # other node is free for a second gang.
    second = await brain.submit(user, gang(1))
    assert second["state"] == "placed" and second["site"] == SITE
    seen = await brain.states_until(user, second["id"], "completed", "failed", timeout_s=60)
    assert seen[-1] == "completed", seen
    cancelled = await brain.call(user, "POST", f"/v1/requests/{first['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    await reported(brain, [0, 0, 0, 0, 2])
    await brain.invariants()


async def test_a_gpu_that_a_fraction_runs_on_is_not_free_in_the_report(brain: Brain) -> None:
    _, user = await brain.tenant_user("sharing")
    await reported(brain, [0, 0, 0, 0, 2])  # the jobs of the tests before have left the nodes
    resources = {"cpu": 1, "memory_gib": 0.25, "accelerator": {"model": "A100", "milli": 250}}
    body = job_request(SITE, resources=resources, job={"command": "sleep 120", "max_attempts": 1})
    made = await brain.submit(user, body)
    assert made["state"] == "placed" and made["site"] == SITE
    await brain.states_until(user, made["id"], "running", timeout_s=60)
    await reported(brain, [0, 0, 0, 1, 1])  # Slurm gives no GPU with shards in use whole
    # 25 of the GPU's 100 shards are in use: 750 thousandths of it are free.
    view = (await brain.as_admin("GET", f"/v1/sites/{SITE}/nodes")).json()
    assert view["pools"][0]["reported_shared_by_free"] == [[750, 1]]
    cancelled = await brain.call(user, "POST", f"/v1/requests/{made['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    await reported(brain, [0, 0, 0, 0, 2])


async def test_a_site_whose_scheduler_cannot_be_read_is_told_once_and_has_no_report(
    brain: Brain, caplog: pytest.LogCaptureFixture
) -> None:
    # The brain's own reads tell of the other site once, within their first intervals.
    await asyncio.sleep(3 * REPORT_INTERVAL_S)
    reports = NodeReports(  # a new one, as another instance's: it has told nothing yet
        map=lambda: brain.brain.live_map.map,
        backend_of=brain.dispatcher.backend_of,
        changes=brain.brain.changes,
        interval_s=30,
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cnbrain.regional"):
        await reports.run_once()
        await reports.run_once()
    told = [r for r in caplog.records if "no node list" in r.getMessage()]
    assert len(told) == 1 and UNREACHABLE_SITE in told[0].getMessage()
    view = (await brain.as_admin("GET", f"/v1/sites/{UNREACHABLE_SITE}/nodes")).json()
    assert [pool["reported_nodes_by_free"] for pool in view["pools"]] == [None]
    assert view["reported_error"] is not None
    assert await pool_report(brain) == [0, 0, 0, 0, 2]
