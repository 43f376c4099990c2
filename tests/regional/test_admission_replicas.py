"""The admission queue across brain processes on one PostgreSQL database: a full queue
survives kill -9 of the instance running the admission loop and a restart, another instance
takes the loop over, and no queued request is ever admitted twice.

The map has 50 A100s reachable from AA (`fifty_gpus`); 50 one-GPU requests hold them all and
80 more wait. Capacity is then freed in two steps, each admitting as many waiting requests.
"""

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from cnbrain.storage.database import create_engine
from tests.databases import create_postgres_database, drop_postgres_database, require_redis
from tests.federation.ledgers import check_invariants
from tests.processes import answers_ready, brain_processes
from tests.regional.brain_api import ADMIN_TOKEN
from tests.regional.fifty_gpus import CAPACITY, ONE_GPU, fifty_gpu_map, new_tenant, submit_all

QUEUED = 80
FAST_LOOP = {"CNBRAIN_ADMISSION_INTERVAL_S": "0.3", "CNBRAIN_ADMISSION_LEASE_S": "2"}


async def _scalar(database: str, sql: str) -> Any:
    engine = create_engine(database)
    try:
        async with engine.connect() as connection:
            return (await connection.execute(text(sql))).scalar()
    finally:
        await engine.dispose()


def _lease_owner(database: str) -> str:
    """The instance holding the admission lease, once one does."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        owner = asyncio.run(
            _scalar(database, "SELECT owner FROM leases WHERE name = 'admission' AND until > now()")
        )
        if owner:
            return str(owner)
        time.sleep(0.2)
    raise AssertionError("no instance took the admission lease")


def _states(url: str, token: str, ids: list[str]) -> dict[str, str]:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
        return {i: client.get(f"/v1/requests/{i}").json()["state"] for i in ids}


def _wait_for(check: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def _cancel(url: str, token: str, ids: list[str]) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
        for request_id in ids:
            answer = client.post(f"/v1/requests/{request_id}/cancel")
            assert answer.status_code == 200, answer.text


def _admitted_events(database: str) -> int:
    """The most `admitted` events any one request has."""
    most = asyncio.run(
        _scalar(
            database,
            "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM request_events"
            " WHERE kind = 'admitted' GROUP BY request_id) AS per_request",
        )
    )
    return int(most)


def test_a_full_queue_survives_kill_9_and_a_restart_and_nothing_is_admitted_twice(
    tmp_path: Path,
) -> None:
    database = asyncio.run(create_postgres_database("cnbrain_queue_replicas"))
    redis = asyncio.run(require_redis())
    namespace = f"queue-{os.getpid()}-{time.monotonic_ns()}"
    common: dict[str, Any] = {
        "database_url": database,
        "redis_url": redis,
        "map_spec": fifty_gpu_map(tmp_path / "map.json"),
        "admin_token": ADMIN_TOKEN,
        "workdir": tmp_path,
        "namespace": namespace,
        "extra_env": FAST_LOOP,
    }
    try:
        with brain_processes(2, **common) as urls:
            token = new_tenant(urls[0], "queue-crowd")
            holders = asyncio.run(submit_all(urls, token, CAPACITY))
            assert all(v["state"] == "placed" for v in holders)
            waiting = asyncio.run(
                submit_all(urls, token, QUEUED, body={**ONE_GPU, "start": "queue"})
            )
            assert all(v["state"] == "queued" for v in waiting), waiting[:2]
            waiting_ids = [v["id"] for v in waiting]

            # kill -9 the instance running the admission loop, with the queue full.
            owner = _lease_owner(database)
            os.kill(int(owner.rsplit("-", 1)[1]), signal.SIGKILL)
            _wait_for(lambda: not all(answers_ready(u) for u in urls), "the killed brain answers")
            survivor = next(u for u in urls if answers_ready(u))
            assert list(_states(survivor, token, waiting_ids).values()) == ["queued"] * QUEUED

            # Free 30: the survivor takes the lease over once it lapses, and admits 30.
            _cancel(survivor, token, [v["id"] for v in holders[:30]])

            def placed_count() -> int:
                return list(_states(survivor, token, waiting_ids).values()).count("placed")

            _wait_for(lambda: placed_count() == 30, "30 queued requests admitted")
            assert _lease_owner(database) != owner

            # Restart the killed instance on the same database; free 20 more.
            with brain_processes(1, **common, first=2) as restarted:
                _cancel(restarted[0], token, [v["id"] for v in holders[30:]])
                _wait_for(lambda: placed_count() == CAPACITY, "50 queued requests admitted")
                time.sleep(1.0)  # a few more rounds: none may admit beyond the capacity
                states = _states(restarted[0], token, waiting_ids)
            assert list(states.values()).count("placed") == CAPACITY
            assert list(states.values()).count("queued") == QUEUED - CAPACITY
        assert _admitted_events(database) == 1
        asyncio.run(check_invariants(database))
        held = asyncio.run(
            _scalar(database, "SELECT count(*) FROM reservations WHERE state = 'held'")
        )
        assert held == CAPACITY
    finally:
        asyncio.run(drop_postgres_database(database))
