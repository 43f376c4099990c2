"""Starting and stopping a brain's gRPC server.

`start_server` builds a `grpc.aio` server with the interceptors of `cnbrain.rpc.interceptors`
(with `cnbrain.rpc.tracing`'s when tracing is on), lets the caller add its servicers, adds the
standard health service (grpc.health.v1) and reflection (grpc.reflection.v1alpha) for them,
binds the address (TLS when configured) and starts. Shutdown is graceful: `RunningServer.stop`
first reports NOT_SERVING, then refuses new calls and lets running ones finish within the
grace period.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from cnbrain.rpc.interceptors import server_interceptors
from cnbrain.rpc.metrics import GrpcServerMetrics
from cnbrain.rpc.security import PeerSecurity

SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    # Never share a port with another process: a second server on a taken port fails to bind.
    ("grpc.so_reuseport", 0),
    # Accept the clients' keepalive pings (see cnbrain.rpc.client.CHANNEL_OPTIONS) ...
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 20_000),
    # ... and ping idle clients, dropping those that do not answer.
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 10_000),
)

Register = Callable[[grpc.aio.Server], Sequence[str]]
"""Adds the servicers to the server and returns their full service names
("cnbrain.v1.LedgerService", ...)."""


@dataclass(eq=False)
class RunningServer:
    """A started server. `port` is the bound port (the real one when the address asked for
    port 0); `services` are the names `register` returned."""

    server: grpc.aio.Server
    port: int
    services: tuple[str, ...]
    _health: health.aio.HealthServicer = field(repr=False)

    async def set_serving(self, serving: bool) -> None:
        """Report every service, and the server as a whole (""), as SERVING or NOT_SERVING.
        No effect once `stop` has begun (it stays NOT_SERVING)."""
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in (*self.services, health.OVERALL_HEALTH):
            await self._health.set(name, status)

    async def stop(self, grace_s: float) -> None:
        """Graceful shutdown: health NOT_SERVING for good, then no new calls, and the calls in
        flight get up to `grace_s` seconds before they are cancelled. Returns once stopped;
        calling it again is harmless."""
        await self._health.enter_graceful_shutdown()
        await self.server.stop(grace_s)

    async def wait_for_termination(self) -> None:
        """Block until the server has stopped."""
        await self.server.wait_for_termination()


async def start_server(
    *,
    address: str,
    security: PeerSecurity,
    register: Register,
    metrics: GrpcServerMetrics | None = None,
) -> RunningServer:
    """Start a server on `address` ("host:port"; port 0 picks a free one) with the servicers
    that `register` adds, health (every returned service and "" SERVING) and reflection;
    with `metrics`, every call is counted and timed there (`cnbrain.rpc.metrics`).

    Every name `register` returns must be a service whose descriptor is loaded (its `_pb2`
    module imported), else ValueError. Raises RuntimeError when the address cannot be bound,
    OSError when a TLS file cannot be read.
    """
    interceptors = server_interceptors(security.token, metrics=metrics)
    server = grpc.aio.server(interceptors=interceptors, options=SERVER_OPTIONS)
    services = tuple(register(server))
    pool = descriptor_pool.Default()
    for name in services:
        try:
            pool.FindServiceByName(name)
        except KeyError:
            raise ValueError(
                f"unknown gRPC service {name!r} (is its _pb2 module imported?)"
            ) from None
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*services, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    try:
        if security.tls:
            port = server.add_secure_port(address, security.server_credentials())
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise RuntimeError(f"cannot bind gRPC server to {address}: {exc}") from None
    if port == 0:
        raise RuntimeError(f"cannot bind gRPC server to {address}")
    running = RunningServer(server=server, port=port, services=services, _health=health_servicer)
    await running.set_serving(True)
    await server.start()
    return running
