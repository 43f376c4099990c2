"""Real outages of Redis and PostgreSQL under running brains: what callers are answered while
a server is down, and that the brains recover once it is back.

Redis is a private server of the test, killed and started again on its port; PostgreSQL is the
shared server reached through a loopback proxy that the test closes and opens again.
"""

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy.exc
import uvicorn
from fastapi import FastAPI
from redis.exceptions import ConnectionError as RedisConnectionError

from cnbrain.cache import CacheUnavailable, channel_name
from cnbrain.cache.follow import MAX_DELAY_S
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.regional.app import create_app
from cnbrain.regional.outages import outage_of
from cnbrain.regional.problems import server_down
from cnbrain.regional.settings import Settings
from cnbrain.regional.use_cases.placing import leaves_pending
from cnbrain.storage.errors import InvalidTransition
from tests.databases import create_postgres_database, drop_postgres_database
from tests.outages import TcpProxy, private_redis, target_of, through_proxy
from tests.polling import wait_until
from tests.processes import free_port
from tests.regional.bodies import GPU_TRAINING, LOCAL_CPU
from tests.regional.brain_api import ADMIN_TOKEN, brain_settings

pytestmark = pytest.mark.asyncio

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
WAIT_S = 5.0
TENANT = "outage"


@contextlib.asynccontextmanager
async def serving(*apps: FastAPI) -> AsyncIterator[list[httpx.AsyncClient]]:
    """Run the lifespans of `apps`; yield an admin client of each over ASGI."""
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for app in apps:
            await stack.enter_async_context(app.router.lifespan_context(app))
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://brain", headers=AUTH
            )
            clients.append(await stack.enter_async_context(client))
        yield clients


def assert_unavailable(answer: httpx.Response, which: str) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert int(answer.headers["retry-after"]) > 0
    problem = answer.json()
    assert problem["unavailable"] == [which]
    assert which in problem["detail"]


def _resyncs(caplog: pytest.LogCaptureFixture) -> int:
    """How many followers of the capacity bus have subscribed again and resynced."""
    return sum("subscribed again and resynced" in r.getMessage() for r in caplog.records)


async def test_replicas_hear_each_other_again_after_a_redis_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cnbrain.cache.follow")
    database = await create_postgres_database("cnbrain_redis_outage")
    try:
        with private_redis() as redis:
            first = brain_settings(database, redis.url, tmp_path, instance_id="one")
            second = first.model_copy(update={"instance_id": "two"})
            app_one, app_two = create_app(first), create_app(second)
            channel = channel_name(first.bus_namespace)
            async with serving(app_one, app_two) as (one, two):
                brain_two = app_two.state.brain
                await wait_until(lambda: redis.subscribers(channel) == 2, WAIT_S)
                assert (await one.post("/v1/tenants", json={"id": TENANT, "name": "t"})).is_success
                cpu, gpu = {**LOCAL_CPU, "tenant": TENANT}, {**GPU_TRAINING, "tenant": TENANT}
                placed = (await one.post("/v1/requests", json=cpu)).json()
                assert placed["state"] == "placed"
                site = (await one.get("/v1/sites")).json()[0]

                redis.stop(signal.SIGKILL)
                # Nothing could be admitted: 503, nothing stored.
                refused = await one.post("/v1/requests", json=gpu)
                assert_unavailable(refused, "cache")
                listed = (await one.get("/v1/requests", params={"tenant": TENANT})).json()
                assert [r["id"] for r in listed["items"]] == [placed["id"]]
                # Committed although the replicas cannot be told: the normal answers.
                cancelled = await one.post(f"/v1/requests/{placed['id']}/cancel")
                assert cancelled.status_code == 200, cancelled.text
                assert cancelled.json()["state"] == "cancelled"
                updated = await one.put(f"/v1/sites/{site['id']}", json=site)
                assert updated.status_code == 200, updated.text
                ready = await one.get("/readyz")
                assert_unavailable(ready, "cache")

                redis.start()
                took = await wait_until(
                    lambda: redis.subscribers(channel) == 2, MAX_DELAY_S + WAIT_S
                )
                assert took <= MAX_DELAY_S + WAIT_S
                # Both have resynced (which drops what they cached) before two caches anew.
                await wait_until(lambda: _resyncs(caplog) == 2, WAIT_S)
                assert (await one.get("/readyz")).status_code == 200
                # Two hears one again: a reservation on one drops two's cached snapshot.
                await brain_two.live_map.snapshot()
                assert brain_two.live_map.cached_snapshot is not None
                again = await one.post("/v1/requests", json=gpu)
                assert again.status_code == 201, again.text
                await wait_until(lambda: brain_two.live_map.cached_snapshot is None, WAIT_S)
                # And one hears two.
                brain_one = app_one.state.brain
                await brain_one.live_map.snapshot()
                assert (await two.post(f"/v1/requests/{again.json()['id']}/cancel")).is_success
                await wait_until(lambda: brain_one.live_map.cached_snapshot is None, WAIT_S)
    finally:
        await drop_postgres_database(database)


@contextlib.asynccontextmanager
async def proxied_database(tmp_path: Path) -> AsyncIterator[tuple[Settings, TcpProxy]]:
    """Settings of a brain whose PostgreSQL database is reached through an open `TcpProxy`
    (and whose cache is in memory)."""
    database = await create_postgres_database("cnbrain_db_outage")
    proxy = TcpProxy(*target_of(database))
    await proxy.open()
    try:
        settings = brain_settings(
            through_proxy(database, proxy), None, tmp_path, metrics_port=0, metrics_max_age_s=0
        )
        yield settings, proxy
    finally:
        await proxy.close()
        await drop_postgres_database(database)


async def test_a_database_outage_answers_503_and_the_brain_recovers(tmp_path: Path) -> None:
    async with proxied_database(tmp_path) as (settings, proxy):
        app = create_app(settings)
        async with serving(app) as (client,):
            assert (await client.post("/v1/tenants", json={"id": TENANT, "name": "d"})).is_success
            submission = {**LOCAL_CPU, "tenant": TENANT}
            assert (await client.post("/v1/requests", json=submission)).status_code == 201

            await proxy.close()
            assert_unavailable(await client.post("/v1/requests", json=submission), "database")
            assert_unavailable(await client.get("/v1/requests"), "database")
            assert_unavailable(await client.get("/readyz"), "database")
            app.state.brain.live_map.capacity_changed()  # no cached snapshot: a scrape reads
            scrape = f"http://127.0.0.1:{app.state.metrics_port}/metrics"
            async with httpx.AsyncClient() as scraper:
                metrics = await scraper.get(scrape)  # answered all the same, saying so
                assert metrics.status_code == 200 and "cnbrain_ledger_read 0.0" in metrics.text

                await proxy.open()
                assert (await client.get("/readyz")).status_code == 200
                assert "cnbrain_ledger_read 1.0" in (await scraper.get(scrape)).text
            assert (await client.post("/v1/requests", json=submission)).status_code == 201
            listed = await client.get("/v1/requests", params={"tenant": TENANT})
            assert listed.status_code == 200
            assert len(listed.json()["items"]) == 2


class RawConnection:
    """One HTTP/1.1 connection, read and written by hand: what the server does with it is
    visible (kept open, or closed after an answer)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def get(self, path: str) -> tuple[int, dict[str, str]]:
        request = (
            f"GET {path} HTTP/1.1\r\nHost: brain\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\r\n"
        )
        self.writer.write(request.encode())
        await self.writer.drain()
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        status = int(head[0].split()[1])
        headers = dict(line.lower().split(": ", 1) for line in head[1:] if line)
        await self.reader.readexactly(int(headers["content-length"]))
        return status, headers

    async def closed_by_server(self) -> bool:
        return await asyncio.wait_for(self.reader.read(1), WAIT_S) == b""


@contextlib.asynccontextmanager
async def http_server(app: FastAPI) -> AsyncIterator[RawConnection]:
    """`app` served over real HTTP on loopback; yields one keep-alive connection to it."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        await wait_until(lambda: server.started, 60)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            yield RawConnection(reader, writer)
        finally:
            writer.close()
    finally:
        server.should_exit = True
        await task


async def test_a_503_keeps_the_connection_open(tmp_path: Path) -> None:
    async with (
        proxied_database(tmp_path) as (settings, proxy),
        http_server(create_app(settings)) as connection,
    ):
        assert (await connection.get("/v1/requests"))[0] == 200
        await proxy.close()
        status, headers = await connection.get("/v1/requests")
        assert status == 503 and "retry-after" in headers
        assert headers.get("connection") != "close"
        await proxy.open()
        assert (await connection.get("/v1/requests"))[0] == 200  # the same connection


async def test_a_500_says_connection_close_and_closes_it(tmp_path: Path) -> None:
    async with proxied_database(tmp_path) as (settings, _):
        app = create_app(settings)

        async def bug() -> Any:
            raise RuntimeError("a bug")  # a route of this test's app only

        app.add_api_route("/test-only/bug", bug)
        async with http_server(app) as connection:
            assert (await connection.get("/healthz"))[0] == 200
            status, headers = await connection.get("/test-only/bug")
            assert status == 500
            assert headers["content-type"].startswith("application/problem+json")
            assert headers["connection"] == "close"
            assert len(headers["x-request-id"]) == 32  # an unexpected error is named too
            assert await connection.closed_by_server()


async def test_only_outages_are_503_not_bugs() -> None:
    refused = ConnectionRefusedError(111, "Connect call failed")
    lost = sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("closed"))
    lost.__cause__ = refused
    assert outage_of(refused) == "database"
    assert outage_of(lost) == "database"
    assert outage_of(sqlalchemy.exc.TimeoutError("QueuePool limit reached")) == "database"
    assert outage_of(RedisConnectionError("Connection closed by server.")) == "cache"
    assert outage_of(CacheUnavailable("Redis at redis://x is unreachable")) == "cache"
    duplicate = sqlalchemy.exc.IntegrityError("INSERT", {}, Exception("duplicate key"))
    duplicate.__cause__ = refused
    assert outage_of(duplicate) is None
    assert outage_of(sqlalchemy.exc.OperationalError("SELECT", {}, Exception("deadlock"))) is None
    assert outage_of(FileNotFoundError(2, "No such file")) is None
    assert outage_of(RuntimeError("a bug")) is None
    peer = PeerUnavailable("the national brain", "unavailable")
    assert outage_of(peer) == "peer"
    assert server_down(peer) is None  # answered as any unavailable error, with its message
    assert server_down(lost) == "database"


async def test_a_decision_interrupted_by_an_outage_leaves_its_request_pending() -> None:
    lost = sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("closed"))
    lost.__cause__ = ConnectionRefusedError(111, "Connect call failed")
    assert leaves_pending(lost)
    assert leaves_pending(sqlalchemy.exc.TimeoutError("QueuePool limit reached"))
    assert leaves_pending(PeerUnavailable("the national brain", "deadline_exceeded"))
    assert leaves_pending(InvalidTransition("r1", "cancelled", "placed"))  # another replica
    assert leaves_pending(sqlalchemy.exc.OperationalError("UPDATE", {}, Exception("deadlock")))
    assert not leaves_pending(RuntimeError("a bug"))
    assert not leaves_pending(FileNotFoundError(2, "No such file"))
