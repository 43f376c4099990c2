"""Real outages for tests: a private Redis server that a test stops and starts again on the
same port, and a loopback TCP proxy to PostgreSQL that a test closes and opens again."""

import asyncio
import contextlib
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy.engine import make_url

from tests.processes import free_port


class PrivateRedis:
    """A `redis-server` of this test alone on a free loopback port, without persistence: a
    restart starts it empty, as a crashed cache server would come back."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed; `bash scripts/services.sh` installs it")
        self.binary = binary
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server and wait until it answers a PING."""
        self._process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        client = Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            while True:
                try:
                    client.ping()
                    return
                except RedisError:
                    if time.monotonic() > deadline or self._process.poll() is not None:
                        raise
                    time.sleep(0.05)
        finally:
            client.close()

    def stop(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Stop the server with `sig` and wait until it is gone."""
        if self._process is not None:
            self._process.send_signal(sig)
            self._process.wait(timeout=10)
            self._process = None

    def subscribers(self, channel: str) -> int:
        """`PUBSUB NUMSUB channel`."""
        client = Redis(port=self.port, socket_connect_timeout=1)
        try:
            answer = client.pubsub_numsub(channel)
        finally:
            client.close()
        return int(answer[0][1])


@contextlib.contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    """A started `PrivateRedis`, stopped at the end."""
    server = PrivateRedis()
    server.start()
    try:
        yield server
    finally:
        server.stop()


class TcpProxy:
    """A loopback TCP proxy to `target_host:target_port` on a port of its own.

    `close()` stops listening and cuts every connection through it (the target looks down:
    connections are refused); `open()` listens again on the same port.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def open(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            target_reader, target_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, target_writer}
        await asyncio.gather(self._pipe(reader, target_writer), self._pipe(target_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()


def through_proxy(database_url: str, proxy: TcpProxy) -> str:
    """`database_url` with its host and port replaced by the proxy's."""
    url = make_url(database_url).set(host="127.0.0.1", port=proxy.port)
    return url.render_as_string(hide_password=False)


def target_of(database_url: str) -> tuple[str, int]:
    """The host and port `database_url` connects to."""
    url = make_url(database_url)
    return url.host or "127.0.0.1", url.port or 5432
