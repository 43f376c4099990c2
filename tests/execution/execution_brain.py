"""A regional brain for the execution tests: real PostgreSQL and Redis, driven in-process over
ASGI, on a small map whose sites run their jobs on fast simulators (an hour per second), with
the dispatcher asking every 0.1 s. Helpers to submit, wait for states, and read the ledger.

The map is tiny_map.py's, with a `site` label on every site (so a request can name the one
it must go to) and a `pool: failover` label on AA-dc.
"""

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cnbrain.domain.backend_ref import BackendRef
from cnbrain.execution import backend_for
from cnbrain.regional.dispatcher import Dispatcher
from cnbrain.storage import ledger_store
from cnbrain.storage.models import JobRecord
from tests.databases import create_postgres_database, drop_postgres_database, require_redis
from tests.execution import local_slurm
from tests.regional.brain_api import Api, brain_settings, serving
from tests.tiny_map import tiny_map_raw

FAST_SIMULATOR = {"kind": "simulator", "time_scale": 3600}
"""A simulated hour per second."""
POLL_S = 0.1
SLURM = {
    "kind": "slurm",
    "url": local_slurm.URL,
    "user": local_slurm.USER,
    "credential": local_slurm.CREDENTIAL,
    "gpu_types": {"A100": "fake"},
    "gpu_shards": local_slurm.SHARDS_PER_GPU,
}
"""A site's execution on the local Slurm."""


def execution_map(path: Path) -> Path:
    """Write the test map to `path` (JSON) and return it."""
    raw = tiny_map_raw()
    for site in raw["sites"]:
        site["execution"] = FAST_SIMULATOR
        site["labels"] = {**site["labels"], "site": site["id"]}
        if site["id"] == "AA-dc":
            site["labels"]["pool"] = "failover"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


def site_registration(
    site_id: str,
    *,
    execution: dict[str, Any],
    cores: float = 2,
    memory_gib: float = 8,
    a100: int = 4,
    price_core: float = 0.05,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The body of POST /v1/sites for a provincial site in AA with `execution`."""
    return {
        "site": {
            "id": site_id,
            "province": "AA",
            "kind": "provincial",
            "lat": 31.0,
            "lon": 121.0,
            "capacity": {
                "cpu_cores": cores,
                "memory_gib": memory_gib,
                "accelerators": {"A100": a100} if a100 else {},
                "storage_gib": 100,
            },
            "prices": {
                "cpu_core_hour": price_core,
                "memory_gib_hour": 0.01,
                "accelerator_hour": {"A100": 9.0} if a100 else {},
            },
            "pue": 1.3,
            "carbon_g_per_kwh": 500,
            "labels": {"site": site_id, **(labels or {})},
            "execution": execution,
        },
        "links": [
            {
                "a": site_id,
                "b": f"AA-agg{i}",
                "layer": "province",
                "bandwidth_gbps": 100,
                "latency_ms": 0.2,
                "cost_per_gbps_hour": 0.01,
            }
            for i in (1, 2)
        ],
    }


def job_request(site: str | None = None, **changes: Any) -> dict[str, Any]:
    """A one-CPU request from AA with a job, on `site` (by its label) when given."""
    body: dict[str, Any] = {
        "source_province": "AA",
        "resources": {"cpu": 1, "memory_gib": 0.5},
        "duration_hours": 1,
        "job": {"command": "echo hello", "max_attempts": 1},
    }
    if site is not None:
        body["constraints"] = {"labels": {"site": site}}
    body.update(changes)
    return body


@dataclass(kw_only=True)
class Brain(Api):
    """A running brain's client (see `Api`), with its dispatcher, and the calls of jobs."""

    dispatcher: Dispatcher

    def another_dispatcher(self) -> Dispatcher:
        """A dispatcher (not started) on this brain's database, map and ledger, built as the
        app builds its own; as another instance's once its `owner` is changed."""
        brain = self.brain
        return Dispatcher(
            sessions=brain.sessions,
            settings=brain.settings,
            credentials=brain.credentials,
            map=lambda: brain.live_map.map,
            changes=brain.changes,
            decider=self.use_cases.decider,
            forget=brain.live_map.capacity_changed,
            national=brain.national,
        )

    async def register_site(self, body: dict[str, Any]) -> None:
        answer = await self.as_admin("POST", "/v1/sites", json=body)
        assert answer.status_code == 201, answer.text

    async def submit(self, token: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = await self.call(token, "POST", "/v1/requests", json=body)
        assert answer.status_code == 201, answer.text
        view: dict[str, Any] = answer.json()
        return view

    async def view(self, token: str, request_id: str) -> dict[str, Any]:
        answer = await self.call(token, "GET", f"/v1/requests/{request_id}")
        assert answer.status_code == 200, answer.text
        view: dict[str, Any] = answer.json()
        return view

    async def attempts(self, token: str, request_id: str) -> list[dict[str, Any]]:
        answer = await self.call(token, "GET", f"/v1/requests/{request_id}/attempts")
        assert answer.status_code == 200, answer.text
        attempts: list[dict[str, Any]] = answer.json()["attempts"]
        return attempts

    async def events(self, token: str, request_id: str) -> list[tuple[str, dict[str, Any]]]:
        """The request's events, oldest first: (kind, detail) each."""
        answer = await self.call(token, "GET", f"/v1/requests/{request_id}/events")
        assert answer.status_code == 200, answer.text
        return [(e["kind"], e["detail"]) for e in answer.json()["events"]]

    async def states_until(
        self, token: str, request_id: str, *final: str, timeout_s: float = 30.0
    ) -> list[str]:
        """Every distinct state the request shows, polled every 0.05 s, until one of
        `final`; the list of states seen in order."""
        seen: list[str] = []
        deadline = time.monotonic() + timeout_s
        while True:
            state = (await self.view(token, request_id))["state"]
            if not seen or seen[-1] != state:
                seen.append(state)
            if state in final:
                return seen
            if time.monotonic() > deadline:
                pytest.fail(f"request {request_id}: {seen}, never {final} in {timeout_s} s")
            await asyncio.sleep(0.05)

    async def held(self, request_id: str) -> list[str]:
        """The reservations the request still holds in the ledger."""
        async with self.brain.sessions() as session:
            held: list[str] = await ledger_store.held_reservations(session, request_id=request_id)
        await self.invariants()
        return held


@contextlib.asynccontextmanager
async def running_brain(
    workdir: Path, *, embedded: bool = False, **settings: Any
) -> AsyncIterator[Brain]:
    """A brain on a new PostgreSQL database (dropped afterwards) and the test Redis; with
    `embedded`, on a SQLite file in `workdir` and the in-process cache instead. Its
    credential store is the local Slurm's unless `settings` names `credentials`; its
    dispatcher asks every `POLL_S` unless `settings` names `execution_poll_s`."""
    settings.setdefault("credentials", local_slurm.CREDENTIALS)
    settings.setdefault("execution_poll_s", POLL_S)
    if embedded:
        database, redis = f"sqlite+aiosqlite:///{workdir / 'brain.db'}", None
    else:
        database = await create_postgres_database("cnbrain_exec")
        redis = await require_redis()
    chosen = brain_settings(
        database,
        redis,
        workdir,
        map=str(execution_map(workdir / "map.json")),
        **settings,
    )
    try:
        async with serving(chosen) as (app, client):
            yield Brain(
                client=client,
                brain=app.state.brain,
                cases=app.state.brain.requests,
                dispatcher=app.state.brain.dispatcher,
            )
    finally:
        if not embedded:
            await drop_postgres_database(database)


async def cancel_every_job(brain: Brain) -> None:
    """Cancel in the local Slurm every job the brain's attempts submitted there."""
    async with brain.brain.sessions() as session:
        ids = list(
            await session.scalars(
                JobRecord.__table__.select()
                .with_only_columns(JobRecord.backend_job_id)
                .where(JobRecord.backend == "slurm", JobRecord.backend_job_id.is_not(None))
            )
        )
    async with contextlib.aclosing(
        backend_for(BackendRef.model_validate(SLURM), credentials=local_slurm.credential_store())
    ) as backend:
        for job_id in ids:
            await backend.cancel(job_id)
