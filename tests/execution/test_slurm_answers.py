"""What a Slurm backend does with answers no slurmrestd gives, from a hostile HTTP server on
loopback standing where slurmrestd would: an answer larger than the backend reads, declared
or streamed, and JSON nested past the parser's depth, are `BackendUnavailable`, not an
exhausted memory or a crash; an answer within the bound is read."""

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import pytest

from cnbrain.execution.errors import BackendUnavailable
from cnbrain.execution.slurm import SlurmBackend
from tests.http_server import serving

pytestmark = pytest.mark.asyncio

LIMIT = 1024 * 1024
"""The backend's `max_response_bytes` in these tests."""

PING = b'{"errors": [], "pings": [{"hostname": "c1", "ping": "UP"}]}'


@contextmanager
def answering(body: bytes, *, declared: bool) -> Iterator[str]:
    """An HTTP server on loopback that answers every GET with `body` (with its length in
    Content-Length when `declared`, else in chunks); its URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if declared:
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for at in range(0, len(body), 65536):
                chunk = body[at : at + 65536]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url


def _backend(url: str) -> SlurmBackend:
    return SlurmBackend(url=url, user="cnbrain", token=lambda: "t", max_response_bytes=LIMIT)


@pytest.mark.parametrize("declared", [True, False])
async def test_an_answer_within_the_bound_is_read(declared: bool) -> None:
    padded = PING[:-1] + b', "pad": "' + b"x" * (LIMIT - len(PING) - 20) + b'"}'
    assert len(padded) <= LIMIT
    with answering(padded, declared=declared) as url:
        async with _backend(url) as backend:
            await backend.ping()


@pytest.mark.parametrize("declared", [True, False])
async def test_an_answer_beyond_the_bound_is_not_read(declared: bool) -> None:
    huge = PING[:-1] + b', "pad": "' + b"x" * LIMIT + b'"}'
    with answering(huge, declared=declared) as url:
        async with _backend(url) as backend:
            with pytest.raises(BackendUnavailable, match=f"more than {LIMIT} bytes"):
                await backend.ping()


async def test_json_nested_past_the_parsers_depth_is_not_slurmrestds() -> None:
    deep = b'{"errors": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with answering(deep, declared=True) as url:
        async with _backend(url) as backend:
            with pytest.raises(BackendUnavailable, match="without slurmrestd's JSON"):
                await backend.ping()
