"""The REST API's server spans: FastAPI's own OpenTelemetry, set up by `rest_telemetry`.

With tracing on (`cnbrain.telemetry.spans.tracing_on`, asked once when the app is built),
each call gets a span of kind SERVER named after its method and route template
("POST /v1/requests", "GET /v1/requests/{request_id}": no ids in names; the method alone
for a path no route matches), the child of the caller's W3C `traceparent` when it sends
one, current while the call is handled (so the gRPC calls it makes carry it on), with
`http.route`, `http.response.status_code` and, once authenticated, `cnbrain.tenant`. The
probes (`PROBES`) get none, and neither does the metrics listener, an app of its own.
FastAPI's metrics, logs and spans of each dependency stay off, and so does its own exporter
set-up (`cnbrain.telemetry.export` owns it).

With tracing off, FastAPI's telemetry is off whole: it then asks nothing per call (left on,
it would ask the environment on every call whether a provider is configured, about 5% of a
submission's CPU time).
"""

from collections.abc import MutableMapping
from typing import Any

from fastapi.telemetry import TelemetryConfig

from cnbrain.telemetry.spans import tracer_provider

PROBES: frozenset[str] = frozenset(("/healthz", "/readyz"))
"""Paths whose calls are not traced: polled by orchestrators."""

OFF: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}


def _probe(scope: MutableMapping[str, Any]) -> bool:
    return scope.get("path") in PROBES


def rest_telemetry() -> TelemetryConfig:
    """The app's `telemetry` argument (module doc)."""
    provider = tracer_provider()
    if provider is None:
        return OFF
    return {
        "tracing": True,
        "tracer_provider": provider,
        "metrics": False,
        "logs": False,
        "operation_spans": False,
        "auto_configure": False,
        "exclude": _probe,
    }
