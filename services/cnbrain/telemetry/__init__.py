"""What a brain tells about the calls it handles, beyond its answers: traces and the tenant.

- spans.py: whether tracing is on in this process, the tracer, `span` for the inner steps
  of a call (a shared no-op when tracing is off) and the current trace id for the logs.
- export.py: `start_tracing`, turning tracing on with the OpenTelemetry SDK and an OTLP/HTTP
  exporter when an endpoint is configured (imported only then).
- tenant.py: the tenant of the call being handled, for the logs.

Tracing is off by default, and then costs nothing per call: the REST server, the gRPC
channels and servers are built without any tracing middleware or interceptor
(`docs/federation.md`, "Traces").
"""
