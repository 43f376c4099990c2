"""A brain logs one record a line naming itself, its region and the current request id (and,
in JSON, the trace of the current span and the caller's tenant): JSON lines for collectors,
plain text in a terminal."""

import io
import json
import logging
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider

from cnbrain.cli.logs import configure_logging
from cnbrain.rpc.context import request_id_scope
from cnbrain.telemetry.spans import span, use_provider
from cnbrain.telemetry.tenant import note_tenant, tenant_scope
from cnbrain.v1 import national_pb2, national_pb2_grpc
from tests.otlp_receiver import receiving
from tests.processes import free_port


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def restored() -> Iterator[None]:
    """The root logger's handlers and level, as they were before the test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_name_the_brain_its_region_and_the_request(restored: None) -> None:
    out = io.StringIO()
    configure_logging(brain="regional", region="east", level="info", stream=out)
    log = logging.getLogger("cnbrain.test")
    log.debug("not at info")
    with request_id_scope("req-42"):
        log.info("placed %s", "r-1")
    try:
        raise ValueError("broken")
    except ValueError:
        log.exception("failed")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert {k: first[k] for k in ("level", "logger", "message", "brain", "region")} == {
        "level": "info",
        "logger": "cnbrain.test",
        "message": "placed r-1",
        "brain": "regional",
        "region": "east",
    }
    assert first["request_id"] == "req-42" and first["at"].endswith("+00:00")
    assert second["request_id"] == "-" and "ValueError: broken" in second["error"]


def test_a_terminal_gets_plain_text(restored: None) -> None:
    out = _Terminal()
    configure_logging(brain="national", region=None, level="warning", stream=out)
    with request_id_scope("req-7"):
        logging.getLogger("cnbrain.test").warning("region %s is down", "west")
    [line] = out.getvalue().splitlines()
    assert line.endswith("WARNING national cnbrain.test [req-7] region west is down"), line


def test_a_national_brain_process_writes_json_lines(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    database = f"sqlite+aiosqlite:///{tmp_path / 'national.db'}"
    command = ["brain", "national", "--database-url", database, "--grpc-port", str(port)]
    process = subprocess.Popen(
        [sys.executable, "-m", "cnbrain.cli.main", *command],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines = []
    try:
        assert process.stderr is not None
        for raw in process.stderr:
            lines.append(json.loads(raw))
            if "gRPC on" in lines[-1]["message"]:
                break
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert any("loaded map china" in line["message"] for line in lines), lines
    assert all(line["brain"] == "national" and line["region"] == "-" for line in lines)


@pytest.fixture
def traced() -> Iterator[TracerProvider]:
    """Tracing on in this process (spans kept nowhere), off again after the test."""
    provider = TracerProvider()
    use_provider(provider)
    yield provider
    use_provider(None)


def test_json_lines_name_the_trace_and_the_tenant_of_the_call(
    restored: None, traced: TracerProvider
) -> None:
    out = io.StringIO()
    configure_logging(brain="regional", region="east", level="info", stream=out)
    log = logging.getLogger("cnbrain.test")
    log.info("before any call")
    with span("a call") as current, tenant_scope():
        assert current is not None
        log.info("not authenticated yet")
        note_tenant("acme")
        log.info("placed")
    with tenant_scope():
        note_tenant(None)  # a caller of no tenant
        log.info("outside any span")
    before, unauthenticated, placed, outside = (
        json.loads(line) for line in out.getvalue().splitlines()
    )
    context = current.get_span_context()
    assert placed["trace_id"] == format(context.trace_id, "032x")
    assert placed["span_id"] == format(context.span_id, "016x")
    assert placed["tenant"] == "acme" and placed["request_id"] == "-"
    assert unauthenticated["trace_id"] == placed["trace_id"] and "tenant" not in unauthenticated
    for line in (before, outside):
        assert not {"trace_id", "span_id", "tenant"} & line.keys(), line


def test_without_tracing_no_line_names_a_trace(restored: None) -> None:
    out = io.StringIO()
    configure_logging(brain="regional", region="east", level="info", stream=out)
    provider = TracerProvider()  # a span of someone else's provider is current ...
    with provider.get_tracer("test").start_as_current_span("elsewhere"), tenant_scope():
        note_tenant("acme")
        logging.getLogger("cnbrain.test").info("placed")
    [line] = (json.loads(line) for line in out.getvalue().splitlines())
    assert "trace_id" not in line and line["tenant"] == "acme"  # ... but this brain traces not


def test_a_terminal_still_gets_plain_text_in_a_traced_call(
    restored: None, traced: TracerProvider
) -> None:
    out = _Terminal()
    configure_logging(brain="regional", region="east", level="info", stream=out)
    with request_id_scope("req-8"), span("a call"), tenant_scope():
        note_tenant("acme")
        logging.getLogger("cnbrain.test").info("placed %s", "r-1")
    [line] = out.getvalue().splitlines()
    assert line.endswith("INFO regional cnbrain.test [req-8] placed r-1"), line


def test_a_traced_brain_process_names_the_callers_trace_in_its_lines(tmp_path: Path) -> None:
    with receiving() as (url, _):
        port = free_port()
        database = f"sqlite+aiosqlite:///{tmp_path / 'national.db'}"
        command = ["brain", "national", "--database-url", database, "--grpc-port", str(port)]
        process = subprocess.Popen(
            [sys.executable, "-m", "cnbrain.cli.main", *command],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "CNBRAIN_OTLP_ENDPOINT": url},
        )
        trace_id = secrets.token_hex(16)
        lines = []
        try:
            assert process.stderr is not None
            for raw in process.stderr:
                lines.append(json.loads(raw))
                if "gRPC on" in lines[-1]["message"]:
                    break
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = national_pb2_grpc.NationalBrainServiceStub(channel)
                with pytest.raises(grpc.RpcError):
                    stub.RegisterRegion(
                        national_pb2.RegisterRegionRequest(region_id=""),
                        timeout=5,
                        metadata=(("traceparent", f"00-{trace_id}-{secrets.token_hex(8)}-01"),),
                    )
            for raw in process.stderr:
                lines.append(json.loads(raw))
                if "RegisterRegion" in lines[-1]["message"]:
                    break
        finally:
            process.terminate()
            process.communicate(timeout=30)  # reads what is left, so no write blocks its exit
    call = lines[-1]
    assert "RegisterRegion" in call["message"] and "code=INVALID_ARGUMENT" in call["message"]
    assert call["trace_id"] == trace_id and len(call["span_id"]) == 16
    assert all("trace_id" not in line for line in lines[:-1])
