"""`cnbrain brain national` and `cnbrain up`: the national brain, and a local federation."""

import argparse
import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx

from cnbrain.cli.context import write_context
from cnbrain.private_files import make_private_folder, write_private
from cnbrain.rpc.failover import MAX_REPLICAS

NATIONAL_GRPC_PORT = 50051
FIRST_REGION_REST_PORT = 8081
REGION_GRPC_OFFSET = 10
"""The i-th region's gRPC port is the national brain's + REGION_GRPC_OFFSET + i."""
READY_TIMEOUT_S = 120.0
STARTED = "Ctrl-C stops them all."
"""The last line `cnbrain up` prints once the federation is up."""


def add_national_command(brain: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    national = brain.add_parser("national", help="run the national brain (gRPC)")
    national.add_argument("--database-url", help="default: $CNBRAIN_DATABASE_URL, else SQLite")
    national.add_argument("--map", help="map loaded into an empty database (default china)")
    add_grpc_options(national)
    national.add_argument(
        "--http-port",
        type=int,
        help="HTTP port of GET /metrics (Prometheus) and /healthz (default: $CNBRAIN_HTTP_PORT, "
        "else none)",
    )
    national.add_argument("--log-level", default="info")
    national.set_defaults(run=brain_national)


def add_grpc_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grpc-host", help="default: $CNBRAIN_GRPC_HOST, else 127.0.0.1")
    parser.add_argument("--grpc-port", type=int, help="default: $CNBRAIN_GRPC_PORT")
    parser.add_argument(
        "--tls-dir", help="directory of `cnbrain certs`: TLS with client certificates"
    )


def grpc_overrides(args: argparse.Namespace) -> dict[str, object]:
    return {
        key: value
        for key, value in (
            ("grpc_host", args.grpc_host),
            ("grpc_port", args.grpc_port),
            ("tls_dir", args.tls_dir),
        )
        if value is not None
    }


def brain_national(args: argparse.Namespace) -> int:
    from cnbrain.cli.logs import configure_logging
    from cnbrain.heap import freeze_heap
    from cnbrain.national.composition import running
    from cnbrain.national.http_app import listening
    from cnbrain.national.settings import NationalSettings
    from cnbrain.telemetry.export import start_tracing

    configure_logging(brain="national", region=None, level=args.log_level)
    overrides = grpc_overrides(args)
    if args.database_url:
        overrides["database_url"] = args.database_url
    if args.map:
        overrides["map"] = args.map
    if args.http_port is not None:
        overrides["http_port"] = args.http_port
    settings = NationalSettings(**overrides)  # type: ignore[arg-type]
    start_tracing(
        brain="national",
        region=None,
        instance=settings.instance_id,
        endpoint=settings.otlp_endpoint,
    )

    async def serve() -> None:
        async with running(settings) as brain, listening(brain) as http_port:
            freeze_heap()
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            port = brain.server.port if brain.server else "-"
            print(f"national brain: gRPC {settings.grpc_host}:{port}", flush=True)
            if http_port is not None:
                url = f"http://{settings.http_host}:{http_port}/metrics"
                print(f"national brain: metrics {url}", flush=True)
            await stop.wait()

    asyncio.run(serve())
    return 0


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    command: list[str]
    environment: dict[str, str]
    rest_port: int | None
    grpc_port: int
    http_port: int | None = None
    """The national brain's HTTP port (its metrics)."""
    metrics_port: int | None = None
    """A regional brain's metrics port."""

    @property
    def ports(self) -> list[int]:
        """Every port the member listens on."""
        given = (self.grpc_port, self.rest_port, self.http_port, self.metrics_port)
        return [port for port in given if port is not None]


def add_up_command(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    up = sub.add_parser(
        "up", help="start a local federation: the national brain and one brain per region"
    )
    up.add_argument("--map", default="china")
    up.add_argument("--data-dir", default=".cnbrain", help="databases and the admin key")
    up.add_argument("--tls", action="store_true", help="TLS with client certificates")
    up.add_argument(
        "--postgres",
        metavar="URL",
        help="a PostgreSQL server (postgresql://user@host:port/db): each brain gets its own "
        "database cnbrain_NAME there, created when missing; default: SQLite files",
    )
    up.add_argument("--redis-url", help="Redis for the regional brains (default: in-process)")
    up.add_argument(
        "--national-replicas",
        type=int,
        default=1,
        choices=range(1, MAX_REPLICAS + 1),
        metavar="N",
        help="replicas of the national brain, on one database (more than one needs "
        "--postgres); replica k listens on the national gRPC port + k - 1 (default 1)",
    )
    up.add_argument(
        "--grpc-port",
        type=int,
        default=NATIONAL_GRPC_PORT,
        help=f"the national brain's gRPC port; the regions' follow from it + "
        f"{REGION_GRPC_OFFSET} (default {NATIONAL_GRPC_PORT})",
    )
    up.add_argument(
        "--rest-port",
        type=int,
        default=FIRST_REGION_REST_PORT,
        help=f"the first region's REST port; the others follow (default {FIRST_REGION_REST_PORT})",
    )
    up.add_argument(
        "--national-http-port",
        type=int,
        help="the national brain's HTTP port (GET /metrics); replica k listens on it + k - 1 "
        "(default: the port after the last region's REST port, 8085 on china)",
    )
    up.add_argument(
        "--metrics-port",
        type=int,
        help="the first region's metrics port (GET /metrics); the others follow (default: "
        "the port after the national brain's last HTTP port, 8086 on china)",
    )
    up.set_defaults(run=run_up)


def federation_members(
    region_ids: list[str],
    data_dir: Path,
    map_name: str,
    databases: dict[str, str] | None = None,
    *,
    national_grpc_port: int = NATIONAL_GRPC_PORT,
    first_rest_port: int = FIRST_REGION_REST_PORT,
    regional_config: Path | None = None,
    national_replicas: int = 1,
    national_http_port: int | None = None,
    first_metrics_port: int | None = None,
) -> list[Member]:
    """The national brain (as `national_replicas` replicas on its one database, named
    national-1, national-2, ... when more than one) and one regional brain per region, on
    loopback ports; each brain on `databases[name]`, or a SQLite file in `data_dir`. The
    regional brains read their settings file `regional_config` (CNBRAIN_CONFIG_FILE), when
    given. Replica k of the national brain serves its metrics on `national_http_port` + k - 1
    (None: the port after the last region's REST port + k - 1); region i serves its metrics
    on `first_metrics_port` + i (None: the port after the national brain's last + i). Raises
    ValueError when two ports are the same or one is not from 1 to 65535 (`check_ports`)."""
    http_base = (
        national_http_port if national_http_port is not None else first_rest_port + len(region_ids)
    )
    metrics_base = (
        first_metrics_port if first_metrics_port is not None else http_base + national_replicas
    )

    def database(name: str) -> str:
        if databases is not None:
            return databases[name]
        return f"sqlite+aiosqlite:///{data_dir / f'{name}.db'}"

    members = [
        Member(
            name="national" if national_replicas == 1 else f"national-{k}",
            command=["brain", "national"],
            environment={
                "CNBRAIN_DATABASE_URL": database("national"),
                "CNBRAIN_GRPC_PORT": str(national_grpc_port + k - 1),
                "CNBRAIN_MAP": map_name,
                "CNBRAIN_INSTANCE_ID": f"national-{k}",
                "CNBRAIN_HTTP_PORT": str(http_base + k - 1),
            },
            rest_port=None,
            grpc_port=national_grpc_port + k - 1,
            http_port=http_base + k - 1,
        )
        for k in range(1, national_replicas + 1)
    ]
    national_endpoint = ",".join(f"127.0.0.1:{m.grpc_port}" for m in members)
    for i, region in enumerate(region_ids):
        grpc_port = national_grpc_port + REGION_GRPC_OFFSET + i
        rest_port = first_rest_port + i
        metrics_port = metrics_base + i
        members.append(
            Member(
                name=region,
                command=["brain", "regional"],
                environment={
                    "CNBRAIN_DATABASE_URL": database(region),
                    "CNBRAIN_MAP": map_name,
                    "CNBRAIN_REGION": region,
                    "CNBRAIN_BUS_NAMESPACE": f"federation-{region}",
                    "CNBRAIN_GRPC_PORT": str(grpc_port),
                    "CNBRAIN_NATIONAL_ENDPOINT": national_endpoint,
                    "CNBRAIN_PORT": str(rest_port),
                    "CNBRAIN_METRICS_PORT": str(metrics_port),
                    "CNBRAIN_ADMIN_TOKEN_FILE": str(data_dir / f"{region}-admin.token"),
                    **(
                        {"CNBRAIN_CONFIG_FILE": str(regional_config)}
                        if regional_config is not None
                        else {}
                    ),
                },
                rest_port=rest_port,
                grpc_port=grpc_port,
                metrics_port=metrics_port,
            )
        )
    check_ports(members)
    return members


def check_ports(members: list[Member]) -> None:
    """Raise ValueError naming the members and the port when two of `members` listen on one
    port, or when one of their ports is not from 1 to 65535."""
    for member in members:
        for port in member.ports:
            if not 1 <= port <= 65535:
                raise ValueError(f"{member.name}'s port {port} is not from 1 to 65535")
    owner: dict[int, str] = {}
    for member in members:
        for port in member.ports:
            if port in owner:
                also = "twice" if owner[port] == member.name else f"and {owner[port]}'s"
                raise ValueError(f"port {port} is {member.name}'s {also}: ports must differ")
            owner[port] = member.name


def write_regional_config(data_dir: Path, *, admin_token: str) -> Path:
    """Write the regional brains' settings file, `data_dir/regional.yaml` (mode 0600): the
    admin key each installs on its first start. A file, so that the key is in no brain's
    environment (which every process the brain starts would inherit)."""
    import yaml

    path = data_dir / "regional.yaml"
    write_private(path, yaml.safe_dump({"admin_token": admin_token}))
    return path


def run_up(args: argparse.Namespace) -> int:
    """Start the national brain, then one regional brain per region of the map, wait until
    all are ready, write the command line's context (`cnbrain.cli.context`) and print their
    endpoints; then run until Ctrl-C or SIGTERM (exit 0) or until a brain exits by itself
    (exit 1). Either way every brain still running is stopped."""
    from cnbrain.netmap.load import load_map

    data_dir = Path(args.data_dir).resolve()
    make_private_folder(data_dir)
    cmap = load_map(args.map)
    token_file = data_dir / "admin.token"
    regional_config = write_regional_config(data_dir, admin_token=_secret(token_file, _api_key))
    shared = {"CNBRAIN_PEER_TOKEN": _secret(data_dir / "peer.token", _peer_token)}
    if args.tls:
        shared["CNBRAIN_TLS_DIR"] = str(_certificates(data_dir / "tls", cmap.regions))
    regions = sorted(cmap.regions)
    if args.national_replicas > 1 and not args.postgres:
        raise SystemExit("--national-replicas above 1 needs --postgres: replicas share a database")
    databases = (
        asyncio.run(_postgres_databases(args.postgres, ["national", *regions]))
        if args.postgres
        else None
    )
    if args.redis_url:
        shared["CNBRAIN_REDIS_URL"] = args.redis_url
    try:
        members = federation_members(
            regions,
            data_dir,
            args.map,
            databases,
            national_grpc_port=args.grpc_port,
            first_rest_port=args.rest_port,
            regional_config=regional_config,
            national_replicas=args.national_replicas,
            national_http_port=args.national_http_port,
            first_metrics_port=args.metrics_port,
        )
    except ValueError as exc:
        raise SystemExit(f"cnbrain up: {exc}") from None
    _stop_on_signals()
    processes: list[tuple[Member, subprocess.Popen[bytes]]] = []
    try:
        _start_members(members, shared, processes)
        _wait_all_ready(processes)
        urls = {m.name: f"http://127.0.0.1:{m.rest_port}" for m in members if m.rest_port}
        context = write_context(data_dir, urls=urls, token_file=token_file)
        _print_endpoints(members, map_name=args.map, data_dir=data_dir, token_file=token_file)
        print(f"  the command line's context (its URL and key): {context}")
        print(STARTED, flush=True)
        return _watch(processes)
    except KeyboardInterrupt:
        return 0
    finally:
        _stop_all(processes)


def _secret(path: Path, new: Callable[[], str]) -> str:
    """The secret held in `path`, stripped; when the file is missing, `new()` is written
    there first (mode 0600), so a restarted federation keeps its keys."""
    if not path.exists():
        write_private(path, new() + "\n")
    return path.read_text(encoding="utf-8").strip()


def _api_key() -> str:
    """A fresh admin API key, `ck_<id>.<secret>`: the form a brain installs as its admin key."""
    return f"ck_{secrets.token_hex(8)}.{secrets.token_urlsafe(32)}"


def _peer_token() -> str:
    """A fresh token shared by the brains of the federation to call one another."""
    return secrets.token_urlsafe(32)


def _certificates(tls_dir: Path, regions: Iterable[str]) -> Path:
    """`tls_dir`, holding a CA and certificates for the national brain and every region;
    written only when it has no CA yet."""
    from cnbrain.rpc.certs import write_certificates

    if not (tls_dir / "ca.pem").exists():
        write_certificates(tls_dir, ["national", *regions])
    return tls_dir


def _start_members(
    members: list[Member],
    shared: dict[str, str],
    processes: "list[tuple[Member, subprocess.Popen[bytes]]]",
) -> None:
    """Start every member in order, each with this process's environment, then `shared`,
    then its own; append each to `processes` as soon as it runs (so that the caller stops
    it whatever happens next). The national brain's gRPC ports must answer before the
    regions start."""
    for member in members:
        env = {**os.environ, **shared, **member.environment}
        process = subprocess.Popen(
            [sys.executable, "-m", "cnbrain.cli.main", *member.command], env=env
        )
        processes.append((member, process))
        if member.rest_port is None:
            _wait_port(member.grpc_port, process)


def _wait_all_ready(processes: "list[tuple[Member, subprocess.Popen[bytes]]]") -> None:
    """Return once every member with a REST port answers `/readyz`; SystemExit when one
    exits or is not ready in time."""
    for member, process in processes:
        if member.rest_port is not None:
            _wait_ready(member.rest_port, process)


def _print_endpoints(
    members: list[Member], *, map_name: str, data_dir: Path, token_file: Path
) -> None:
    """Print every member's endpoints and where the admin API key is."""
    print()
    print(f"local federation on map {map_name} (data in {data_dir}):")
    for member in members:
        rest = f"REST http://127.0.0.1:{member.rest_port}  " if member.rest_port else ""
        metrics_port = member.http_port or member.metrics_port
        metrics = f"  metrics http://127.0.0.1:{metrics_port}/metrics" if metrics_port else ""
        print(f"  {member.name:<9} {rest}gRPC 127.0.0.1:{member.grpc_port}{metrics}")
    print(f"  admin API key (every regional brain): {token_file}")


def _watch(processes: "list[tuple[Member, subprocess.Popen[bytes]]]") -> int:
    """Wait until a member exits by itself, say which exited, and return 1 (Ctrl-C or
    SIGTERM interrupt the wait with KeyboardInterrupt)."""
    while all(p.poll() is None for _, p in processes):
        time.sleep(0.5)
    failed = [m.name for m, p in processes if p.poll() is not None]
    print(f"stopped: {', '.join(failed)} exited", file=sys.stderr)
    return 1


async def _postgres_databases(server: str, names: list[str]) -> dict[str, str]:
    """URL of database cnbrain_NAME on `server` for every name, created when missing."""
    import asyncpg  # type: ignore[import-untyped]
    from sqlalchemy.engine import make_url

    base = make_url(server)
    connection = await asyncpg.connect(
        base.set(drivername="postgresql").render_as_string(hide_password=False)
    )
    try:
        urls = {}
        for name in names:
            database = f"cnbrain_{name}"
            exists = await connection.fetchval(
                "SELECT 1 FROM pg_database WHERE datname = $1", database
            )
            if not exists:
                await connection.execute(f'CREATE DATABASE "{database}"')
            urls[name] = base.set(
                drivername="postgresql+asyncpg", database=database
            ).render_as_string(hide_password=False)
        return urls
    finally:
        await connection.close()


def _stop_on_signals() -> None:
    """SIGINT (Ctrl-C) and SIGTERM both stop the federation: as KeyboardInterrupt in the main
    thread, also when a script started it in the background (where SIGINT comes ignored)."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, interrupt)


def _wait_port(port: int, process: "subprocess.Popen[bytes]") -> None:
    import socket

    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"a brain exited with status {process.returncode} while starting")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.2)
    raise SystemExit(f"nothing answered on port {port} within {READY_TIMEOUT_S:.0f} s")


def _wait_ready(port: int, process: "subprocess.Popen[bytes]") -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"a brain exited with status {process.returncode} while starting")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return
        time.sleep(0.3)
    raise SystemExit(f"the brain on port {port} was not ready within {READY_TIMEOUT_S:.0f} s")


def _stop_all(processes: "list[tuple[Member, subprocess.Popen[bytes]]]") -> None:
    for _, process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for _, process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
