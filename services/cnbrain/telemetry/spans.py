"""Tracing on or off in this process, and the spans of a call's inner steps.

Tracing is on once `use_provider` was given a tracer provider (`export.start_tracing` does it
at a brain's start); what is built afterwards (the REST app, gRPC channels and servers) asks
`tracing_on` once, when it is built, and installs its tracing only then. `span` is asked on
every call, so it is a check of one module global when tracing is off.
"""

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext

from opentelemetry import trace
from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

TRACER_NAME = "cnbrain"
"""The instrumentation scope of every span the brains make."""

_provider: trace.TracerProvider | None = None
_tracer: trace.Tracer | None = None
_OFF: AbstractContextManager[None] = nullcontext()


def use_provider(provider: trace.TracerProvider | None) -> None:
    """Trace with `provider` from now on (None: tracing off). Only what is built afterwards
    follows the change; a brain calls it once, before building anything."""
    global _provider, _tracer
    _provider = provider
    _tracer = None if provider is None else provider.get_tracer(TRACER_NAME)


def tracing_on() -> bool:
    """Whether this process traces."""
    return _tracer is not None


def tracer_provider() -> trace.TracerProvider | None:
    """The provider in use, None when tracing is off."""
    return _provider


def tracer() -> trace.Tracer | None:
    """The brains' tracer, None when tracing is off."""
    return _tracer


def span(
    name: str, attributes: Mapping[str, AttributeValue] | None = None
) -> AbstractContextManager[Span | None]:
    """A span named `name` (a fixed name: an id goes in `attributes`, never in the name),
    current inside the block and ended after it, a child of the current span; an exception
    leaving the block marks it failed. With tracing off, a shared block that does nothing
    (and yields None)."""
    if _tracer is None:
        return _OFF
    return _tracer.start_as_current_span(name, attributes=attributes)


def current_trace_id() -> str | None:
    """The trace id (32 hexadecimal digits) of the span current in this context, None when
    tracing is off or no span is current."""
    if _tracer is None:
        return None
    context = trace.get_current_span().get_span_context()
    return trace.format_trace_id(context.trace_id) if context.is_valid else None


def current_span_id() -> str | None:
    """The id (16 hexadecimal digits) of the span current in this context, or None."""
    if _tracer is None:
        return None
    context = trace.get_current_span().get_span_context()
    return trace.format_span_id(context.span_id) if context.is_valid else None


def set_attribute(key: str, value: AttributeValue) -> None:
    """Set `key` on the current span; nothing when tracing is off or none is current."""
    if _tracer is not None:
        trace.get_current_span().set_attribute(key, value)
