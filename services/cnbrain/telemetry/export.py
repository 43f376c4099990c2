"""Turning tracing on: the OpenTelemetry SDK, exporting over OTLP/HTTP (protobuf).

A brain traces when a collector is named: its `otlp_endpoint` setting
(`CNBRAIN_OTLP_ENDPOINT`, the collector's base URL: spans go to `<it>/v1/traces`), else the
standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL) or `OTEL_EXPORTER_OTLP_ENDPOINT`
(a base URL); `OTEL_SDK_DISABLED=true` keeps it off all the same. The SDK's own variables
hold as usual: `OTEL_EXPORTER_OTLP_HEADERS` and the other exporter settings,
`OTEL_TRACES_SAMPLER` (default: every trace, a child as its parent was sampled),
`OTEL_BSP_*` for the batches, `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`. Spans are
sent in batches from a thread of their own, and what is left is sent when the process exits.
"""

import os

from cnbrain.telemetry.spans import use_provider

STANDARD_ENDPOINT_VARIABLES = (
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)
"""The standard variables that name a collector when the brain's setting does not."""

TRACES_PATH = "/v1/traces"


def tracing_configured(endpoint: str | None) -> bool:
    """Whether a brain whose `otlp_endpoint` setting is `endpoint` traces (module doc)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(endpoint) or any(os.environ.get(name) for name in STANDARD_ENDPOINT_VARIABLES)


def start_tracing(*, brain: str, region: str | None, instance: str, endpoint: str | None) -> bool:
    """Turn tracing on in this process when it is configured (`tracing_configured`), as
    service `cnbrain-<brain>` (unless `OTEL_SERVICE_NAME` names it) with its region and
    instance id; returns whether it is on. Call once, before the brain builds its app,
    channels and servers. The exporter is not reached here: a collector that is down costs
    the spans, logged by the SDK, never a call."""
    if not tracing_configured(endpoint):
        return False
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes: dict[str, str] = {"service.instance.id": instance, "cnbrain.brain": brain}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = f"cnbrain-{brain}"
    if region is not None:
        attributes["cnbrain.region"] = region
    exporter = (
        OTLPSpanExporter(endpoint=endpoint.rstrip("/") + TRACES_PATH)
        if endpoint
        else OTLPSpanExporter()  # the standard variables
    )
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    use_provider(provider)
    return True
