"""A federation of separate brain processes on loopback, each with its own PostgreSQL
database, for end-to-end tests. Members can be killed (SIGKILL) and started again."""

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx

from cnbrain.v1 import national_pb2, national_pb2_grpc
from tests.databases import create_postgres_database, drop_postgres_database, require_redis
from tests.processes import answers_ready, free_port, wait_ready
from tests.slow_commits import DELAY_VARIABLE as SLOW_COMMITS_MS

READY_S = 90.0
REGIONS = ["east", "north", "south", "west"]
"""The regions of the built-in map."""


@dataclass
class Member:
    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    grpc_port: int
    rest_port: int | None = None
    metrics_port: int | None = None
    """A regional brain's metrics listener (`CNBRAIN_METRICS_PORT`)."""
    main: str = "cnbrain.cli.main"
    """The module run with `python -m`: the brain's command line, or a test's wrapper of it."""
    process: "subprocess.Popen[bytes] | None" = field(default=None, repr=False)

    @property
    def url(self) -> str:
        assert self.rest_port is not None
        return f"http://127.0.0.1:{self.rest_port}"


class LocalFederation:
    """The national brain (one or more replicas) and one regional brain per entry of
    `regions`."""

    def __init__(
        self,
        *,
        workdir: Path,
        databases: dict[str, str],
        redis_url: str,
        admin_token: str,
        regions: list[str],
        national_env: dict[str, str] | None = None,
        shared_env: dict[str, str] | None = None,
        commit_delay_ms: int = 0,
        national_replicas: int = 1,
    ) -> None:
        self.admin_token = admin_token
        self.databases = databases
        """Database URL of every member, by name."""
        taken: set[int] = set()

        def port() -> int:
            while (chosen := free_port()) in taken:
                pass
            taken.add(chosen)
            return chosen

        base = {**os.environ, **(shared_env or {})}
        self.members: dict[str, Member] = {}
        for k in range(1, national_replicas + 1):
            name = "national" if k == 1 else f"national-{k}"
            grpc_port = port()
            self.members[name] = Member(
                name=name,
                args=["brain", "national", "--log-level", "warning"],
                env={
                    **base,
                    "CNBRAIN_DATABASE_URL": databases["national"],
                    "CNBRAIN_GRPC_PORT": str(grpc_port),
                    "CNBRAIN_INSTANCE_ID": f"national-{k}",
                    **(national_env or {}),
                },
                log=workdir / f"{name}.log",
                grpc_port=grpc_port,
            )
            if commit_delay_ms:
                _slow_commits(self.members[name], commit_delay_ms)
        self.national_port = self.members["national"].grpc_port
        national_endpoint = ",".join(
            f"127.0.0.1:{m.grpc_port}" for m in self.members.values() if m.rest_port is None
        )
        for region in regions:
            grpc_port, rest_port, metrics_port = port(), port(), port()
            self.members[region] = Member(
                name=region,
                args=["brain", "regional", "--log-level", "warning"],
                env={
                    **base,
                    "CNBRAIN_DATABASE_URL": databases[region],
                    "CNBRAIN_REDIS_URL": redis_url,
                    "CNBRAIN_BUS_NAMESPACE": f"{region}-{os.getpid()}-{time.monotonic_ns()}",
                    "CNBRAIN_REGION": region,
                    "CNBRAIN_GRPC_PORT": str(grpc_port),
                    "CNBRAIN_NATIONAL_ENDPOINT": national_endpoint,
                    "CNBRAIN_PORT": str(rest_port),
                    "CNBRAIN_METRICS_PORT": str(metrics_port),
                    "CNBRAIN_ADMIN_TOKEN": admin_token,
                    "CNBRAIN_ADMIN_TOKEN_FILE": str(workdir / f"{region}-admin.token"),
                    "CNBRAIN_SUMMARY_INTERVAL_S": "0.5",
                },
                log=workdir / f"{region}.log",
                grpc_port=grpc_port,
                rest_port=rest_port,
                metrics_port=metrics_port,
            )
        self.workdir = workdir

    def start(self) -> None:
        for name, member in self.members.items():
            self.start_member(name, wait=member.rest_port is None)
        for name in self.members:
            self.wait_ready(name)

    def start_member(self, name: str, *, wait: bool = True) -> None:
        member = self.members[name]
        log = member.log.open("ab")
        member.process = subprocess.Popen(
            [sys.executable, "-m", member.main, *member.args],
            env=member.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
        )
        if wait:
            self.wait_ready(name)

    def wait_ready(self, name: str) -> None:
        member = self.members[name]
        assert member.process is not None
        wait_ready(
            member.process, member.log, lambda: self._ready(member), what=name, timeout_s=READY_S
        )

    def wait_registered(self, timeout_s: float = 30.0) -> None:
        """Until every regional brain says the national brain has it registered."""
        deadline = time.monotonic() + timeout_s
        pending = [m for m in self.members.values() if m.rest_port is not None]
        while pending and time.monotonic() < deadline:
            pending = [m for m in pending if not self._registered(m)]
            time.sleep(0.2)
        if pending:
            raise RuntimeError(f"not registered: {[m.name for m in pending]}")

    def kill(self, name: str) -> None:
        process = self.members[name].process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    def stop(self) -> None:
        for member in self.members.values():
            if member.process is not None and member.process.poll() is None:
                member.process.terminate()
        for member in self.members.values():
            if member.process is None:
                continue
            try:
                member.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                member.process.kill()

    def _ready(self, member: Member) -> bool:
        if member.rest_port is None:
            return _grpc_serving(member.grpc_port, member.env.get("CNBRAIN_PEER_TOKEN"))
        return answers_ready(member.url)

    def _registered(self, member: Member) -> bool:
        try:
            answer = httpx.get(f"{member.url}/readyz", timeout=1)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200 and answer.json().get("national_registered") is True


def _grpc_serving(port: int, token: str | None) -> bool:
    """Whether the national brain answers a call: registering no region is refused with
    INVALID_ARGUMENT once it serves."""
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = national_pb2_grpc.NationalBrainServiceStub(channel)
        try:
            stub.RegisterRegion(
                national_pb2.RegisterRegionRequest(region_id=""), timeout=1, metadata=metadata
            )
        except grpc.RpcError as error:
            return bool(error.code() == grpc.StatusCode.INVALID_ARGUMENT)
        return True


def _slow_commits(member: Member, delay_ms: int) -> None:
    """Run `member` (the national brain) through `tests.slow_commits`, with the repository
    root on its path."""
    root = str(Path(__file__).resolve().parents[1])
    path = member.env.get("PYTHONPATH")
    member.main = "tests.slow_commits"
    member.env["PYTHONPATH"] = f"{root}{os.pathsep}{path}" if path else root
    member.env[SLOW_COMMITS_MS] = str(delay_ms)


def local_federation(
    workdir: Path,
    *,
    regions: list[str] = REGIONS,
    database_prefix: str = "cnbrain_fed",
    national_env: dict[str, str] | None = None,
    shared_env: dict[str, str] | None = None,
    commit_delay_ms: int = 0,
    national_replicas: int = 1,
) -> Iterator[LocalFederation]:
    """A started federation (every region registered) on fresh PostgreSQL databases
    `{database_prefix}_{member}` and the test Redis, for a fixture to `yield from`; stopped
    and its databases dropped afterwards. `shared_env` goes to every member. With
    `commit_delay_ms`, the national brain waits that long between preparing and committing
    the parts of each batch (see `slow_commits`). With `national_replicas` above 1, the
    national brain runs as that many replicas on its one database (members `national`,
    `national-2`, ...), and the regions know them all."""

    async def create() -> dict[str, str]:
        return {
            name: await create_postgres_database(f"{database_prefix}_{name}")
            for name in ["national", *regions]
        }

    urls = asyncio.run(create())
    federation = LocalFederation(
        workdir=workdir,
        databases=urls,
        redis_url=asyncio.run(require_redis()),
        admin_token=f"ck_{secrets.token_hex(8)}.{secrets.token_urlsafe(32)}",
        regions=regions,
        national_env=national_env,
        commit_delay_ms=commit_delay_ms,
        national_replicas=national_replicas,
        shared_env={"CNBRAIN_PEER_TOKEN": secrets.token_urlsafe(24), **(shared_env or {})},
    )
    try:
        federation.start()
        federation.wait_registered()
        yield federation
    finally:
        federation.stop()

        async def drop() -> None:
            for url in urls.values():
                await drop_postgres_database(url)

        asyncio.run(drop())
