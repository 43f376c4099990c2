"""Re-wrapping a server method handler so that code runs around its behaviour.

Server interceptors of `grpc.aio` see the method handler, not the call: to act per call (set
the request id, check the token, log the outcome) they return a copy of the handler whose
behaviour runs inside an async context manager built from the call's ServicerContext.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import grpc

Around = Callable[[grpc.aio.ServicerContext[Any, Any]], AbstractAsyncContextManager[None]]
"""Builds the context manager that one call's behaviour runs inside."""

_Behaviour = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any]


def wrap_handler(
    handler: grpc.RpcMethodHandler[Any, Any], around: Around
) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler of the same kind and serialisation as `handler` whose behaviour runs inside
    `around(context)`. Exceptions (aborts included) from `around` or the behaviour propagate
    as they would without the wrapper."""
    kinds: tuple[tuple[Any, Callable[..., grpc.RpcMethodHandler[Any, Any]], bool], ...] = (
        (handler.unary_unary, grpc.unary_unary_rpc_method_handler, False),
        (handler.unary_stream, grpc.unary_stream_rpc_method_handler, True),
        (handler.stream_unary, grpc.stream_unary_rpc_method_handler, False),
        (handler.stream_stream, grpc.stream_stream_rpc_method_handler, True),
    )
    for behaviour, make, streams_responses in kinds:
        if behaviour is not None:
            wrapped = (
                _streaming(behaviour, around) if streams_responses else _unary(behaviour, around)
            )
            return make(
                wrapped,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
    raise ValueError("method handler without a behaviour")


def _unary(behaviour: _Behaviour, around: Around) -> _Behaviour:
    async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        async with around(context):
            result = behaviour(request, context)
            if inspect.isawaitable(result):
                result = await result
            return result

    return call


def _streaming(behaviour: _Behaviour, around: Around) -> _Behaviour:
    async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        async with around(context):
            result = behaviour(request, context)
            if inspect.isawaitable(result):
                # A handler that writes with context.write() and returns nothing.
                result = await result
            if result is None:
                return
            if hasattr(result, "__aiter__"):
                async for message in result:
                    yield message
            else:
                for message in result:
                    yield message

    return call
