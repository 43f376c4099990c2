"""Typed clients of the standard health and reflection services on an asyncio channel.

The published stubs of both services type only the blocking channel, so these build the
same calls from the channel itself."""

import grpc
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

HealthCheck = grpc.aio.UnaryUnaryMultiCallable[
    health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse
]
ReflectionInfo = grpc.aio.StreamStreamMultiCallable[
    reflection_pb2.ServerReflectionRequest, reflection_pb2.ServerReflectionResponse
]


def health_check(channel: grpc.aio.Channel) -> HealthCheck:
    """`grpc.health.v1.Health/Check` on `channel`."""
    return channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )


def reflection_info(channel: grpc.aio.Channel) -> ReflectionInfo:
    """`grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo` on `channel`."""
    return channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
