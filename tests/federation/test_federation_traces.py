"""End to end on separate processes: with tracing on, a tenant's call is one trace across
the brains it reaches. Every brain exports its spans over OTLP/HTTP to a receiver in the
test's process (`tests.otlp_receiver`); the test's caller sends its own `traceparent`, so
the trace is known in advance.

- The README's GPU job from Zhejiang submitted on the east's brain is placed on a western
  hub by the national brain: the east's REST call, the national brain's placement (its
  engine decision and both phases of the commit) and the west's ledger calls are one trace,
  each span the child of the one that caused it.
- The same job submitted on the west's brain (Zhejiang is the east's) is first forwarded
  through the national brain to the east's, which then escalates it: still one trace.
- With `OTEL_SDK_DISABLED=true`, a brain configured to export sends nothing.
"""

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from cnbrain.v1 import national_pb2, national_pb2_grpc
from tests.federation.member_requests import GPU_REQUEST
from tests.federation_processes import LocalFederation, local_federation
from tests.otlp_receiver import CLIENT, INTERNAL, SERVER, ReceivedSpan, Receiver, receiving
from tests.polling import until
from tests.processes import free_port

WITHIN_S = 30.0
GRPC_NAME = r"cnbrain\.v1\.[A-Za-z]+Service/[A-Za-z]+"
INNER_NAMES = frozenset(
    ("placement.decide", "federation.ask", "two_phase.prepare", "two_phase.commit")
)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: Any) -> Iterator[tuple[LocalFederation, Receiver]]:
    """The national brain, the east's and the west's, all exporting to one receiver."""
    with receiving() as (url, receiver):
        for federation in local_federation(
            tmp_path_factory.mktemp("traces"),
            regions=["east", "west"],
            database_prefix="cnbrain_fedtrace",
            shared_env={
                "CNBRAIN_OTLP_ENDPOINT": url,
                "OTEL_BSP_SCHEDULE_DELAY": "100",
                "CNBRAIN_TENANCY_INTERVAL_S": "0.5",
            },
        ):
            yield federation, receiver


def _traceparent() -> tuple[str, str, str]:
    """A sampled W3C traceparent of a new trace: (header, trace id, parent span id)."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def _complete_trace(receiver: Receiver, trace_id: str, regions: set[str]) -> list[ReceivedSpan]:
    """The spans of `trace_id` once the REST span came, each other span's parent came too,
    and every brain of `regions` and the national brain sent its part; [] until then."""
    spans = [s for s in receiver.spans() if s.trace_id == trace_id]
    ids = {s.span_id for s in spans}
    rest = [s for s in spans if "http.route" in s.attributes]
    parents_known = all(s.parent_id in ids for s in spans if s not in rest)
    seen = {str(s.resource.get("cnbrain.region", "national")) for s in spans}
    return spans if rest and parents_known and regions | {"national"} <= seen else []


def _brain(span: ReceivedSpan) -> str:
    return str(span.resource.get("cnbrain.region", "national"))


def _check_links(spans: list[ReceivedSpan], caller_span: str, rest_on: str) -> None:
    """One REST span on `rest_on`, the child of the caller's; every gRPC server span the
    child of a client span of another brain, of the same method; every other span the child
    of a span of its own brain; no id in any name."""
    by_id = {s.span_id: s for s in spans}
    [rest] = [s for s in spans if "http.route" in s.attributes]
    assert rest.kind == SERVER and _brain(rest) == rest_on
    assert rest.name == "POST /v1/requests" and rest.parent_id == caller_span
    assert rest.attributes["http.response.status_code"] == 201
    assert rest.service == "cnbrain-regional"
    for span in spans:
        if span is rest:
            continue
        assert span.parent_id is not None
        parent = by_id[span.parent_id]
        if span.kind == SERVER:
            assert parent.kind == CLIENT and parent.name == span.name, (span, parent)
            assert _brain(parent) != _brain(span), span
            assert span.attributes["rpc.grpc.status_code"] == 0, span
        else:
            assert _brain(parent) == _brain(span), (span, parent)
        if span.kind in (SERVER, CLIENT):
            assert re.fullmatch(GRPC_NAME, span.name), span.name
        else:
            assert span.kind == INTERNAL and span.name in INNER_NAMES, span.name


def _servers(spans: list[ReceivedSpan], brain: str) -> set[str]:
    return {s.name for s in spans if s.kind == SERVER and _brain(s) == brain}


def _inner(spans: list[ReceivedSpan], brain: str) -> set[str]:
    return {s.name for s in spans if s.kind == INTERNAL and _brain(s) == brain}


def _gpu_job() -> dict[str, Any]:
    return {k: v for k, v in GPU_REQUEST.items() if k != "id"}


def _cancel(url: str, request_id: str, headers: dict[str, str]) -> None:
    answer = httpx.post(f"{url}/v1/requests/{request_id}/cancel", headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_request_placed_in_another_region_is_one_trace_across_three_brains(
    traced: tuple[LocalFederation, Receiver],
) -> None:
    federation, receiver = traced
    admin = {"Authorization": f"Bearer {federation.admin_token}"}
    east = federation.members["east"].url
    made = httpx.post(f"{east}/v1/tenants", json={"id": "acme", "name": "Acme"}, headers=admin)
    assert made.status_code in (201, 409), made.text
    header, trace_id, caller_span = _traceparent()
    answer = httpx.post(
        f"{east}/v1/requests",
        json={**_gpu_job(), "tenant": "acme"},
        headers={**admin, "traceparent": header},
        timeout=60,
    )
    assert answer.status_code == 201, answer.text
    view = answer.json()
    assert view["state"] == "placed", view
    owners = [segment["owner"] for segment in view["decision"]["path"]["segments"]]
    assert owners == ["east", "national", "west"], owners

    async def complete() -> list[ReceivedSpan] | None:
        return _complete_trace(receiver, trace_id, {"east", "west"}) or None

    spans = await until(complete, "the trace from the east, the national brain and the west")
    _check_links(spans, caller_span, rest_on="east")
    national = _servers(spans, "national")
    assert "cnbrain.v1.NationalBrainService/PlaceCrossRegion" in national, national
    # The admin submitted it for acme: the request's tenant names the calls on both brains.
    [rest] = [s for s in spans if "http.route" in s.attributes]
    [placing] = [
        s
        for s in spans
        if s.kind == SERVER and s.name == "cnbrain.v1.NationalBrainService/PlaceCrossRegion"
    ]
    assert rest.attributes["cnbrain.tenant"] == placing.attributes["cnbrain.tenant"] == "acme"
    assert {"cnbrain.v1.LedgerService/Prepare", "cnbrain.v1.LedgerService/Commit"} <= (
        _servers(spans, "west")
    )
    assert {"placement.decide", "two_phase.prepare", "two_phase.commit"} <= _inner(
        spans, "national"
    )
    assert all(s.service == "cnbrain-national" for s in spans if _brain(s) == "national")
    _cancel(east, view["id"], admin)


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_forwarded_request_is_one_trace_through_the_national_brain(
    traced: tuple[LocalFederation, Receiver],
) -> None:
    federation, receiver = traced
    admin = {"Authorization": f"Bearer {federation.admin_token}"}
    east, west = federation.members["east"].url, federation.members["west"].url
    made = httpx.post(f"{west}/v1/tenants", json={"id": "hooli", "name": "Hooli"}, headers=admin)
    assert made.status_code == 201, made.text
    user = httpx.post(
        f"{west}/v1/users",
        json={"name": "hooli-user", "role": "tenant-user", "tenant": "hooli"},
        headers=admin,
    )
    assert user.status_code == 201, user.text
    made_key = httpx.post(f"{west}/v1/users/{user.json()['id']}/api-keys", headers=admin)
    key = {"Authorization": f"Bearer {made_key.json()['token']}"}

    async def known_on_east() -> bool | None:
        answer = httpx.get(f"{east}/v1/requests", headers=key)
        return None if answer.status_code == 401 else True

    await until(known_on_east, "the key working on the east", WITHIN_S)
    header, trace_id, caller_span = _traceparent()
    answer = httpx.post(
        f"{west}/v1/requests",
        json=_gpu_job(),
        headers={**key, "traceparent": header},
        timeout=60,
    )
    assert answer.status_code == 201, answer.text
    view = answer.json()
    assert view["state"] == "placed" and view["tenant"] == "hooli", view

    async def complete() -> list[ReceivedSpan] | None:
        return _complete_trace(receiver, trace_id, {"east", "west"}) or None

    spans = await until(complete, "the trace from the west, the national brain and the east")
    _check_links(spans, caller_span, rest_on="west")
    [rest] = [s for s in spans if "http.route" in s.attributes]
    assert rest.attributes["cnbrain.tenant"] == "hooli"
    assert "cnbrain.v1.NationalBrainService/Forward" in _servers(spans, "national")
    [answered] = [
        s
        for s in spans
        if s.name == "cnbrain.v1.RegionalBrainService/ServeForwarded" and s.kind == SERVER
    ]
    assert _brain(answered) == "east"
    assert answered.attributes.get("cnbrain.tenant") == "hooli", answered
    assert "placement.decide" in _inner(spans, "east") | _inner(spans, "national")
    _cancel(west, view["id"], key)


def _run_national(tmp_path: Path, env: dict[str, str], traceparent: str) -> None:
    """A national brain on SQLite with `env`: one call carrying `traceparent`, then a
    graceful stop (which sends whatever spans it holds)."""
    port = free_port()
    database = f"sqlite+aiosqlite:///{tmp_path / f'national-{port}.db'}"
    command = ["brain", "national", "--database-url", database, "--grpc-port", str(port)]
    process = subprocess.Popen(
        [sys.executable, "-m", "cnbrain.cli.main", *command],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if "gRPC on" in line:
                break
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = national_pb2_grpc.NationalBrainServiceStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.RegisterRegion(
                    national_pb2.RegisterRegionRequest(region_id=""),
                    timeout=5,
                    metadata=(("traceparent", traceparent),),
                )
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        process.terminate()
        process.communicate(timeout=30)  # reads what is left, so no write blocks its exit
    assert process.returncode == 0


def test_a_brain_with_the_sdk_disabled_exports_nothing(tmp_path: Path) -> None:
    with receiving() as (url, receiver):
        base = {**os.environ, "CNBRAIN_OTLP_ENDPOINT": url}
        header, trace_id, caller_span = _traceparent()
        _run_national(tmp_path, base, header)
        # The control: the same brain exporting sends the call's span when it stops.
        [handled] = [s for s in receiver.spans() if s.trace_id == trace_id]
        assert handled.name == "cnbrain.v1.NationalBrainService/RegisterRegion"
        assert handled.parent_id == caller_span and handled.kind == SERVER

        exports = receiver.exports
        header, trace_id, _ = _traceparent()
        _run_national(tmp_path, {**base, "OTEL_SDK_DISABLED": "true"}, header)
        assert receiver.exports == exports
        assert not [s for s in receiver.spans() if s.trace_id == trace_id]
