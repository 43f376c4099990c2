"""A small OTLP/HTTP receiver for tests: brains in other processes export their spans to it
(`CNBRAIN_OTLP_ENDPOINT`), and it keeps them in memory, decoded with `opentelemetry-proto`.

Only traces (`POST /v1/traces`, protobuf, plain or gzip): what the brains' exporter sends.
"""

import contextlib
import gzip
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.http_server import serving

SERVER = Span.SpanKind.SPAN_KIND_SERVER
CLIENT = Span.SpanKind.SPAN_KIND_CLIENT
INTERNAL = Span.SpanKind.SPAN_KIND_INTERNAL
ERROR = Status.StatusCode.STATUS_CODE_ERROR


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, with the resource attributes of the process that made it."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: int
    attributes: dict[str, object]
    resource: dict[str, object]
    status: int

    @property
    def service(self) -> object:
        return self.resource.get("service.name")


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def _attributes(pairs: "list[KeyValue]") -> dict[str, object]:
    return {pair.key: _value(pair.value) for pair in pairs}


class Receiver:
    """The spans received so far (thread-safe), and how many export requests brought them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self.exports = 0

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def take(self, request: ExportTraceServiceRequest) -> None:
        received = [
            ReceivedSpan(
                trace_id=span.trace_id.hex(),
                span_id=span.span_id.hex(),
                parent_id=span.parent_span_id.hex() or None,
                name=span.name,
                kind=span.kind,
                attributes=_attributes(list(span.attributes)),
                resource=_attributes(list(resource_spans.resource.attributes)),
                status=span.status.code,
            )
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]
        with self._lock:
            self._spans.extend(received)
            self.exports += 1


@contextlib.contextmanager
def receiving() -> Iterator[tuple[str, Receiver]]:
    """A receiver on a free loopback port: its base URL (for `CNBRAIN_OTLP_ENDPOINT`) and
    what it received; stopped afterwards."""
    receiver = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            receiver.take(ExportTraceServiceRequest.FromString(body))
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url, receiver
