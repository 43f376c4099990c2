"""`cnbrain brain regional --workers 2`: two processes serve one port as replicas of one brain
(one database, one Redis); together they never take more than there is."""

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.databases import create_postgres_database, drop_postgres_database, require_redis
from tests.federation.ledgers import check_invariants
from tests.processes import answers_ready, free_port, wait_ready
from tests.regional.brain_api import ADMIN_TOKEN
from tests.regional.fifty_gpus import (
    CAPACITY,
    fifty_gpu_map,
    new_tenant,
    submit_all,
)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    workdir: Path = tmp_path_factory.mktemp("workers")
    database = asyncio.run(create_postgres_database("cnbrain_workers"))
    redis = asyncio.run(require_redis())
    port = free_port()
    env = {
        **os.environ,
        "CNBRAIN_ADMIN_TOKEN": ADMIN_TOKEN,
        "CNBRAIN_ADMIN_TOKEN_FILE": str(workdir / "admin.token"),
        "CNBRAIN_BUS_NAMESPACE": f"workers-{os.getpid()}-{time.monotonic_ns()}",
    }
    log = workdir / "brain.log"
    with log.open("wb") as out:
        brain = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cnbrain.cli.main",
                "brain",
                "regional",
                "--workers",
                "2",
                "--database-url",
                database,
                "--redis-url",
                redis,
                "--map",
                fifty_gpu_map(workdir / "map.json"),
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(brain, log, lambda: answers_ready(url), what="the brain", timeout_s=90)
        yield url, database
    finally:
        os.killpg(brain.pid, signal.SIGTERM)
        try:
            brain.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(brain.pid, signal.SIGKILL)
        asyncio.run(drop_postgres_database(database))


def instances(url: str, tries: int = 200) -> set[str]:
    """The instance ids that answer on `url`, one new connection per call."""
    seen: set[str] = set()
    for _ in range(tries):
        seen.add(httpx.get(f"{url}/healthz", timeout=5).json()["instance"])
        if len(seen) > 1:
            break
    return seen


def test_two_workers_serve_one_port_and_never_oversubscribe(
    two_workers: tuple[str, str],
) -> None:
    url, database = two_workers
    assert len(instances(url)) == 2
    token = new_tenant(url, "crowd")
    views = asyncio.run(submit_all([url], token, 120))
    assert sum(v["state"] == "placed" for v in views) == CAPACITY
    assert all(v["reason"] for v in views if v["state"] == "rejected")
    asyncio.run(check_invariants(database))
