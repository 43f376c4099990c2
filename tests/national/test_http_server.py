"""The national brain's HTTP listener (`federation.http_server`): an app served with uvicorn in
the running event loop for as long as the block lasts, on the port it bound; a port that is
taken is an OSError at once, not an exit of the process."""

import socket

import httpx
import pytest
from fastapi import FastAPI

from cnbrain.federation.http_server import serving

pytestmark = pytest.mark.asyncio


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/ping")
    async def ping() -> dict[str, str]:
        return {"answer": "pong"}

    return app


async def test_the_app_answers_on_the_port_bound_until_the_block_ends() -> None:
    async with serving(_app(), host="127.0.0.1", port=0) as port:
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"http://127.0.0.1:{port}/ping")
        assert answer.json() == {"answer": "pong"}
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as client:
            await client.get(f"http://127.0.0.1:{port}/ping")


async def test_a_port_taken_is_an_error_at_once() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            async with serving(_app(), host="127.0.0.1", port=taken.getsockname()[1]):
                pass


async def test_a_shared_port_is_served_by_every_server_that_shares_it() -> None:
    async with serving(_app(), host="127.0.0.1", port=0, shared=True) as port:
        async with serving(_app(), host="127.0.0.1", port=port, shared=True) as again:
            assert again == port
            async with httpx.AsyncClient() as client:
                answer = await client.get(f"http://127.0.0.1:{port}/ping")
            assert answer.json() == {"answer": "pong"}
        with pytest.raises(OSError):  # one that does not share it is refused all the same
            async with serving(_app(), host="127.0.0.1", port=port):
                pass
