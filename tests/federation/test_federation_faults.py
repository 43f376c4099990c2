"""End to end under failures: a destination brain killed between prepare and commit, the
national brain down, and brains refusing a peer without a valid certificate."""

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from sqlalchemy import text

from cnbrain.rpc.certs import write_certificates
from cnbrain.storage import requests
from cnbrain.storage.database import create_engine, session_factory
from cnbrain.v1 import national_pb2, national_pb2_grpc
from tests.databases import create_postgres_database, drop_postgres_database
from tests.federation.ledgers import check_invariants, rows, unreleased
from tests.federation.member_requests import GPU_REQUEST, cancel, submit
from tests.federation_processes import LocalFederation, local_federation
from tests.processes import free_port

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

TTL_MS = 5_000
COMMIT_DELAY_MS = 3_000


@pytest.fixture(scope="module")
def slow_commits(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from local_federation(
        tmp_path_factory.mktemp("faults"),
        national_env={"CNBRAIN_PREPARE_TTL_MS": str(TTL_MS)},
        commit_delay_ms=COMMIT_DELAY_MS,
    )


async def _prepared(url: str) -> list[dict[str, Any]]:
    return await rows(url, "SELECT id FROM peer_reservations WHERE state = 'prepared'")


async def test_destination_killed_between_prepare_and_commit_leaves_nothing_reserved(
    slow_commits: LocalFederation,
) -> None:
    federation = slow_commits
    databases = federation.databases
    answer = asyncio.create_task(asyncio.to_thread(submit, federation, "east", GPU_REQUEST))
    deadline = time.monotonic() + 30
    while not await _prepared(databases["west"]):
        assert not answer.done(), f"answered before west prepared anything: {answer.result()}"
        assert time.monotonic() < deadline, "west never prepared its part"
        await asyncio.sleep(0.05)

    federation.kill("west")
    view = await answer

    assert view["state"] in ("placed", "rejected")
    if view["state"] == "placed":
        owners = [s["owner"] for s in view["decision"]["path"]["segments"]]
        assert "west" not in owners
    else:
        assert "west" in view["reason"]
    federation.start_member("west")
    await asyncio.sleep(TTL_MS / 1000 + 1.5)
    assert await unreleased(databases["west"]) == []
    used = await rows(databases["west"], "SELECT sum(used) AS used FROM site_accelerators")
    assert used[0]["used"] == 0
    for owner in ("east", "national"):
        left = await unreleased(databases[owner])
        if view["state"] == "placed":
            assert left == [{"id": view["decision"]["reservation_id"], "state": "held"}]
        else:
            assert left == []
    for url in databases.values():
        await check_invariants(url)
    if view["state"] == "placed":
        cancel(federation, "east", view["id"])
    federation.wait_registered()


async def test_national_brain_down_local_still_placed_cross_region_fails_fast(
    slow_commits: LocalFederation,
) -> None:
    federation = slow_commits
    local = {
        "source_province": "ZJ",
        "resources": {"cpu": 2.0, "memory_gib": 4.0},
        "duration_hours": 1.0,
        "workload_class": "batch",
    }
    federation.kill("national")

    placed_locally = submit(federation, "east", local)
    start = time.monotonic()
    cross = submit(federation, "east", GPU_REQUEST)
    elapsed = time.monotonic() - start

    assert placed_locally["state"] == "placed"
    assert cross["state"] == "rejected"
    assert "national brain is unavailable" in cross["reason"]
    assert elapsed < 10
    federation.start_member("national")
    federation.wait_registered()
    again = submit(federation, "east", GPU_REQUEST)
    assert again["state"] == "placed", again["reason"]
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    listing = httpx.get(
        f"{federation.members['east'].url}/v1/requests",
        params={"tenant": "acme", "limit": 100},
        headers=headers,
    ).json()
    states = {item["id"]: item["state"] for item in listing["items"]}
    assert states[placed_locally["id"]] == "placed"
    assert states[cross["id"]] == "rejected"
    assert "pending" not in states.values()
    cancel(federation, "east", again["id"])
    cancel(federation, "east", placed_locally["id"])


async def test_cancel_while_the_national_brain_is_down_answers_503_and_changes_nothing(
    slow_commits: LocalFederation,
) -> None:
    federation = slow_commits
    placed = submit(federation, "east", GPU_REQUEST)
    assert placed["state"] == "placed", placed["reason"]
    reservation_id = placed["decision"]["reservation_id"]
    before = {owner: await _holding(url) for owner, url in federation.databases.items()}
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    url = f"{federation.members['east'].url}/v1/requests/{placed['id']}/cancel"
    federation.kill("national")
    try:
        refused = httpx.post(url, headers=headers, timeout=30)
    finally:
        federation.start_member("national")
        federation.wait_registered()

    assert refused.status_code == 503, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.headers["retry-after"]
    assert re.fullmatch(
        f"the national brain could not release reservation {reservation_id!r} "
        r"\((unavailable|deadline_exceeded)\); try again",
        refused.json()["detail"],
    ), refused.json()
    assert _view(federation, placed["id"])["state"] == "placed"
    after = {owner: await _holding(url) for owner, url in federation.databases.items()}
    assert after == before
    assert cancel(federation, "east", placed["id"])["state"] == "cancelled"
    for owner in ("east", "national", "west"):
        assert reservation_id not in [
            r["id"] for r in await unreleased(federation.databases[owner])
        ]
    for database in federation.databases.values():
        await check_invariants(database)


async def test_brains_refuse_a_peer_without_a_valid_certificate(tmp_path: Path) -> None:
    tls, stranger = tmp_path / "tls", tmp_path / "stranger"
    write_certificates(tls, ["national", "east"])
    write_certificates(stranger, ["east"])
    url = await create_postgres_database("cnbrain_fed_tls")
    port = free_port()
    env = {
        **os.environ,
        "CNBRAIN_DATABASE_URL": url,
        "CNBRAIN_GRPC_PORT": str(port),
        "CNBRAIN_TLS_DIR": str(tls),
    }
    with (tmp_path / "national.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cnbrain.cli.main", "brain", "national"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while (valid := await _register_code(port, tls, tls)) == grpc.StatusCode.UNAVAILABLE:
            assert time.monotonic() < deadline, (tmp_path / "national.log").read_text()
            await asyncio.sleep(0.5)

        assert valid == grpc.StatusCode.INVALID_ARGUMENT
        assert await _register_code(port, tls, stranger) == grpc.StatusCode.UNAVAILABLE
        assert await _register_code(port, tls, None) == grpc.StatusCode.UNAVAILABLE
    finally:
        process.terminate()
        process.wait(timeout=15)
        await drop_postgres_database(url)


async def _register_code(port: int, trusted: Path, identity: Path | None) -> grpc.StatusCode:
    """The status of registering no region with the national brain over TLS that trusts
    `trusted`'s CA, as `east` with the certificate in `identity` (None: no certificate)."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(trusted / "ca.pem").read_bytes(),
        private_key=(identity / "east-key.pem").read_bytes() if identity else None,
        certificate_chain=(identity / "east.pem").read_bytes() if identity else None,
    )
    async with grpc.aio.secure_channel(
        f"127.0.0.1:{port}",
        credentials,
        options=(("grpc.ssl_target_name_override", "national"),),
    ) as channel:
        stub = national_pb2_grpc.NationalBrainServiceStub(channel)
        try:
            await stub.RegisterRegion(national_pb2.RegisterRegionRequest(), timeout=2)
        except grpc.aio.AioRpcError as error:
            return error.code()
    return grpc.StatusCode.OK


async def test_a_request_left_pending_is_decided_at_start_while_the_national_brain_is_down(
    slow_commits: LocalFederation,
) -> None:
    federation = slow_commits
    submit(federation, "east", {**GPU_REQUEST, "resources": {"cpu": 1.0, "memory_gib": 1.0}})
    federation.kill("east")
    federation.kill("national")
    request_id = f"req-left-{os.getpid()}"
    engine = create_engine(federation.databases["east"])
    try:
        async with session_factory(engine).begin() as session:
            admin = (await session.execute(text("SELECT id FROM users LIMIT 1"))).scalar_one()
            await requests.insert_requests(
                session,
                [
                    requests.NewRequest(
                        request_id=request_id,
                        tenant_id="acme",
                        user_id=admin,
                        body={**GPU_REQUEST, "id": request_id, "tenant": "acme"},
                    )
                ],
            )
    finally:
        await engine.dispose()

    federation.start_member("east")  # waits until ready: recovery never stops a start
    view = _view(federation, request_id)
    assert view["state"] == "rejected"
    assert "national brain is unavailable" in view["reason"]
    federation.start_member("national")
    federation.wait_registered()


async def _holding(url: str) -> list[tuple[str, str]]:
    return sorted((r["id"], r["state"]) for r in await unreleased(url))


def _view(federation: LocalFederation, request_id: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    url = f"{federation.members['east'].url}/v1/requests/{request_id}"
    view: dict[str, Any] = httpx.get(url, headers=headers, timeout=30).json()
    return view
