"""Regional brains as separate OS processes on loopback, for tests that need real replicas."""

import asyncio
import contextlib
import functools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from tests.databases import create_postgres_database, drop_postgres_database, require_redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def brain_processes(
    count: int,
    *,
    database_url: str,
    redis_url: str,
    map_spec: str,
    admin_token: str,
    workdir: Path,
    namespace: str | None = None,
    extra_env: dict[str, str] | None = None,
    first: int = 0,
) -> Iterator[list[str]]:
    """Start `count` brains sharing one database and Redis (and the bus `namespace`, a new
    one by default), with `extra_env` in their environment; yield their base URLs. Their logs
    are `brain-<i>.log` in `workdir`, `i` counted from `first`."""
    namespace = namespace or f"replicas-{os.getpid()}-{time.monotonic_ns()}"
    env = {
        **os.environ,
        "CNBRAIN_ADMIN_TOKEN": admin_token,
        "CNBRAIN_ADMIN_TOKEN_FILE": str(workdir / "admin.token"),
        "CNBRAIN_BUS_NAMESPACE": namespace,
        **(extra_env or {}),
    }
    processes: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for i in range(first, first + count):
            port = free_port()
            log = (workdir / f"brain-{i}.log").open("wb")
            processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "cnbrain.cli.main",
                        "brain",
                        "regional",
                        "--database-url",
                        database_url,
                        "--redis-url",
                        redis_url,
                        "--map",
                        map_spec,
                        "--port",
                        str(port),
                        "--log-level",
                        "warning",
                    ],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=workdir,
                )
            )
            url = f"http://127.0.0.1:{port}"
            urls.append(url)
            wait_ready(
                processes[-1],
                workdir / f"brain-{i}.log",
                functools.partial(answers_ready, url),
                what=f"brain at {url}",
            )
        yield urls
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()


@contextlib.contextmanager
def brains_on_a_new_database(
    count: int,
    *,
    prefix: str,
    map_spec: str,
    admin_token: str,
    workdir: Path,
    extra_env: dict[str, str] | None = None,
) -> Iterator[tuple[list[str], str]]:
    """`brain_processes` on a new PostgreSQL database (named `prefix_...`) and the test Redis;
    yields the brains' base URLs and the database URL, and drops the database afterwards."""
    database = asyncio.run(create_postgres_database(prefix))
    redis = asyncio.run(require_redis())
    try:
        with brain_processes(
            count,
            database_url=database,
            redis_url=redis,
            map_spec=map_spec,
            admin_token=admin_token,
            workdir=workdir,
            extra_env=extra_env,
        ) as urls:
            yield urls, database
    finally:
        asyncio.run(drop_postgres_database(database))


def answers_ready(url: str) -> bool:
    """Whether the brain at `url` answers /readyz with 200."""
    try:
        return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait_ready(
    process: subprocess.Popen[bytes],
    log: Path,
    ready: Callable[[], bool],
    *,
    what: str,
    timeout_s: float = 60,
) -> None:
    """Poll `ready()` every 0.2 s until it holds. Raises RuntimeError with the process's `log`
    when `process` (named `what`) exits first or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited:\n{log.read_text(errors='replace')}")
        if ready():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} not ready in {timeout_s} s:\n{log.read_text(errors='replace')}")
