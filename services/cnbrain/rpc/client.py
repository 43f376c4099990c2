"""Channels from one brain to another.

`open_channel` gives a `grpc.aio` channel with the client interceptors (a span and the trace
context when tracing is on, `cnbrain.rpc.tracing`; request id, peer token), TLS when
configured, keepalive, and a retry policy: a call that ends UNAVAILABLE is tried again with
exponential backoff, at most `MAX_ATTEMPTS` times in all. Retrying is safe because every
RPC of cnbrain.v1 is idempotent by design (see the comments in protos/cnbrain/v1).

Every call must pass `timeout=`: `DEADLINE_S` for control calls, `PLACEMENT_DEADLINE_S` for
`PlaceCrossRegion` and `QuoteCrossRegion`, which make calls of their own. A call without a
deadline can wait forever on a peer that accepted it and never answers. The retries happen
within the one deadline.
"""

import json

import grpc

from cnbrain.rpc.interceptors import client_interceptors
from cnbrain.rpc.security import PeerSecurity
from cnbrain.rpc.tracing import tracing_client_interceptors
from cnbrain.v1 import ledger_pb2, national_pb2, paths_pb2, regional_pb2

DEADLINE_S = 2.0
"""Deadline of a control call: candidates, segments, prepare/commit/release, registration."""
PLACEMENT_DEADLINE_S = 15.0
"""Deadline of a cross-region placement (it calls several brains and runs the solver)."""

MAX_ATTEMPTS = 3
"""Attempts of one call, the first included, when the previous ones ended UNAVAILABLE."""

RETRIED_SERVICES: tuple[str, ...] = tuple(
    service.full_name
    for module in (ledger_pb2, regional_pb2, national_pb2, paths_pb2)
    for service in module.DESCRIPTOR.services_by_name.values()
)
"""The services whose calls are retried: all of cnbrain.v1."""

SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{"service": name} for name in RETRIED_SERVICES],
                "retryPolicy": {
                    "maxAttempts": MAX_ATTEMPTS,
                    "initialBackoff": "0.1s",
                    "maxBackoff": "1s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)

CHANNEL_OPTIONS: tuple[tuple[str, str | int], ...] = (
    ("grpc.enable_retries", 1),
    ("grpc.service_config", SERVICE_CONFIG),
    # Peers are near (loopback, one compose network): notice a dead one within ~40 s even
    # when idle, and reconnect quickly after it comes back.
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 5_000),
)


def open_channel(
    endpoint: str, *, security: PeerSecurity, server_name: str | None = None
) -> grpc.aio.Channel:
    """A channel to `endpoint` ("host:port"), with the options above.

    With TLS, the server's certificate must be signed by the CA and name the host of
    `endpoint`, or `server_name` when given (for a peer reached by an address its certificate
    does not list). The caller closes the channel (`await channel.close()`). Raises OSError
    when a TLS file cannot be read.
    """
    # Tracing first (none when off): the span covers the call and its retries.
    interceptors = [*tracing_client_interceptors(), *client_interceptors(security.token)]
    if not security.tls:
        return grpc.aio.insecure_channel(
            endpoint, options=CHANNEL_OPTIONS, interceptors=interceptors
        )
    options = CHANNEL_OPTIONS
    if server_name is not None:
        options = (*options, ("grpc.ssl_target_name_override", server_name))
    return grpc.aio.secure_channel(
        endpoint, security.channel_credentials(), options=options, interceptors=interceptors
    )
