"""gRPC plumbing shared by every brain: servers, channels, interceptors, peer security.

- `start_server` / `RunningServer` (server.py): a `grpc.aio` server with health, reflection,
  the interceptors and graceful shutdown.
- `open_channel` (client.py): a channel with the interceptors, TLS, keepalive and retries on
  UNAVAILABLE; every call passes `timeout=` (`DEADLINE_S`, `PLACEMENT_DEADLINE_S`).
- `PeerSecurity` (security.py): mutual TLS files and the shared peer token.
- request ids (context.py): `current_request_id`, `request_id_scope`, `new_request_id`.
- metrics (metrics.py): `GrpcServerMetrics`, the calls a server counts and times when
  `start_server` is given them.
- `write_certificates` (certs.py): the development CA and certificates of `cnbrain certs`.
"""

from cnbrain.rpc.client import DEADLINE_S, MAX_ATTEMPTS, PLACEMENT_DEADLINE_S, open_channel
from cnbrain.rpc.context import (
    REQUEST_ID_HEADER,
    RequestIdLogFilter,
    current_request_id,
    new_request_id,
    request_id_scope,
)
from cnbrain.rpc.security import PeerSecurity
from cnbrain.rpc.server import RunningServer, start_server

__all__ = [
    "DEADLINE_S",
    "MAX_ATTEMPTS",
    "PLACEMENT_DEADLINE_S",
    "REQUEST_ID_HEADER",
    "PeerSecurity",
    "RequestIdLogFilter",
    "RunningServer",
    "current_request_id",
    "new_request_id",
    "open_channel",
    "request_id_scope",
    "start_server",
]
