"""Serving an ASGI app (the national brain's HTTP app, a regional brain's metrics listener) with
uvicorn inside the running event loop, beside the brain's other servers, for as long as a
context lasts.

The socket is bound before uvicorn starts, so a port that cannot be bound is an OSError
here (uvicorn itself would exit the process); uvicorn takes no signals (the brain handles
them) and starts no lifespan (the brain is running already).
"""

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator

import uvicorn
from starlette.types import ASGIApp

STOP_S = 5
"""How long calls under way get to finish when the server stops."""


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the brain's own handlers stop it


@contextlib.asynccontextmanager
async def serving(
    app: ASGIApp, *, host: str, port: int, shared: bool = False
) -> AsyncIterator[int]:
    """Serve `app` on `host`:`port` (0: a free port) until the block ends; yields the port
    bound. Raises OSError when it cannot be bound. With `shared`, processes that all bind
    the port so share it (SO_REUSEPORT: the kernel spreads the connections among them, as
    among the worker processes of one brain); without, a port taken is refused."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=STOP_S,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="http")
    try:
        while not server.started:
            if task.done():
                task.result()  # what stopped it
                raise RuntimeError("the HTTP server stopped as it started")
            await asyncio.sleep(0.01)
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        try:
            await task
        finally:
            sock.close()
