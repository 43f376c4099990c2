"""A bare HTTP/1.1 keep-alive client for the benchmarks that time a running brain's API.

The benchmarks usually share the machine with the brains they measure, and a general-purpose
client's own CPU time (about 3 ms per request with httpx) would be taken from them. This one
does only what the brain's JSON API needs: one request at a time per connection, bodies with
Content-Length, answers by Content-Length or chunked encoding.
"""

import asyncio
import contextlib
import time
from collections.abc import Iterator
from urllib.parse import urlsplit


class HttpError(Exception):
    """The brain's answer could not be read as HTTP/1.1."""


class Connection:
    """One keep-alive HTTP/1.1 connection to the brain, for one request at a time.

    Enough for the brain's JSON API: bodies are sent with Content-Length, and answers are read
    by Content-Length or chunked encoding. It reconnects when the server closed the connection
    between requests.
    """

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self._host, self._port = host, port
        self._head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": host, **headers}.items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, body: bytes = b"", *, retry: bool = True
    ) -> tuple[int, bytes]:
        """Send one request; the status and body of the answer. When the server had closed
        the idle connection (no answer at all), the request is sent once more on a new one."""
        if self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
        reader, writer = self._reader, self._writer
        assert reader is not None
        length = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        writer.write(f"{method} {path} HTTP/1.1\r\n{self._head}{length}\r\n".encode() + body)
        status_line = await reader.readline()
        if not status_line:
            await self.close()
            if retry:
                return await self.request(method, path, body, retry=False)
            raise HttpError(f"{method} {path}: the connection closed without an answer")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise HttpError(f"not an HTTP answer: {status_line!r}")
        headers: dict[bytes, bytes] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            chunks = []
            while size := int((await reader.readline()).split(b";")[0], 16):
                chunks.append(await reader.readexactly(size))
                await reader.readline()
            await reader.readline()
            content = b"".join(chunks)
        else:
            content = await reader.readexactly(int(headers.get(b"content-length", b"0")))
        if headers.get(b"connection", b"").lower() == b"close":
            await self.close()
        return int(parts[1]), content

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
            self._reader = self._writer = None


async def in_flight(
    connections: list[Connection], calls: Iterator[tuple[str, str, bytes]]
) -> list[tuple[float, int, bytes]]:
    """Make `calls` (method, path, body) with one call in flight per connection; for each,
    in the order answered: (latency in ms, status, body)."""
    results: list[tuple[float, int, bytes]] = []

    async def worker(connection: Connection) -> None:
        for method, path, body in calls:
            start = time.perf_counter()
            status, content = await connection.request(method, path, body)
            results.append(((time.perf_counter() - start) * 1000, status, content))

    await asyncio.gather(*(worker(c) for c in connections))
    return results


def connections_to(url: str, headers: dict[str, str], count: int) -> tuple[list[Connection], str]:
    """`count` connections to the server of `url`, sending `headers` on every request, and
    the path prefix of `url` (without a trailing slash) to put before request paths."""
    target = urlsplit(url)
    host, port = target.hostname or "127.0.0.1", target.port or 80
    return [Connection(host, port, headers) for _ in range(count)], target.path.rstrip("/")
