"""With tracing on, each REST call is a server span named after its method and route
template (never an id), the child of the caller's `traceparent`, with its status and the
tenant of the caller's key; the brain's decision is a span inside it; probes and the scrapes
of the metrics listener get none."""

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from cnbrain.telemetry.spans import use_provider
from tests.databases import create_postgres_database, drop_postgres_database, require_redis
from tests.federation.member_requests import GPU_REQUEST
from tests.regional.brain_api import Api, brain_settings, serving

pytestmark = pytest.mark.asyncio(loop_scope="module")

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def traced(tmp_path_factory: Any) -> AsyncIterator[tuple[Api, InMemorySpanExporter]]:
    """A brain built with tracing on, its spans kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_provider(provider)
    database = await create_postgres_database("cnbrain_rest_traces")
    settings = brain_settings(
        database, await require_redis(), tmp_path_factory.mktemp("brain"), metrics_port=0
    )
    try:
        async with serving(settings) as (app, client):
            api = Api(client=client, brain=app.state.brain, metrics_port=app.state.metrics_port)
            yield api, exporter
    finally:
        use_provider(None)
        await drop_postgres_database(database)


def _server_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]


async def test_a_call_is_a_span_named_by_its_route_under_the_callers_trace(
    traced: tuple[Api, InMemorySpanExporter],
) -> None:
    api, exporter = traced
    tenant, _, key = await api.tenant("traced")
    exporter.clear()
    submitted = await api.call(
        key,
        "POST",
        "/v1/requests",
        json={k: v for k, v in GPU_REQUEST.items() if k != "id"},
        headers={"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"},
    )
    assert submitted.status_code == 201, submitted.text
    request_id = submitted.json()["id"]
    read = await api.call(key, "GET", f"/v1/requests/{request_id}")
    assert read.status_code == 200, read.text
    missing = await api.call(key, "GET", "/v1/no-such-path")
    assert missing.status_code == 404

    submit, get, unmatched = _server_spans(exporter)
    assert submit.name == "POST /v1/requests"
    assert get.name == "GET /v1/requests/{request_id}" and request_id not in get.name
    assert unmatched.name == "GET"
    assert submit.context is not None and submit.parent is not None
    assert format(submit.context.trace_id, "032x") == TRACE_ID
    assert format(submit.parent.span_id, "016x") == CALLER_SPAN and submit.parent.is_remote
    assert get.parent is None  # no traceparent: a trace of its own
    for span, status in ((submit, 201), (get, 200), (unmatched, 404)):
        attributes = span.attributes or {}
        assert attributes["http.response.status_code"] == status
        assert span.status.status_code is not StatusCode.ERROR
    assert (submit.attributes or {})["cnbrain.tenant"] == tenant
    assert (submit.attributes or {})["http.route"] == "/v1/requests"
    decisions = [s for s in exporter.get_finished_spans() if s.name == "placement.decide"]
    assert decisions and all(
        s.parent is not None and s.parent.span_id == submit.context.span_id for s in decisions
    )


async def test_probes_and_metrics_are_not_traced(
    traced: tuple[Api, InMemorySpanExporter],
) -> None:
    api, exporter = traced
    exporter.clear()
    for path in ("/healthz", "/readyz"):
        answer = await api.client.get(path)
        assert answer.status_code == 200, (path, answer.text)
    assert api.metrics_port is not None
    async with httpx.AsyncClient() as scraper:
        scraped = await scraper.get(f"http://127.0.0.1:{api.metrics_port}/metrics")
    assert scraped.status_code == 200, scraped.text
    assert exporter.get_finished_spans() == ()
