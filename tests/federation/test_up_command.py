"""`cnbrain up` as a user runs it: the embedded default (SQLite files), the README's
cross-region example with the admin key that no brain has in its environment, the context
the command line finds the brains by, and a clean stop on Ctrl-C or SIGTERM with no brain
left behind."""

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from cnbrain.cli.federation import REGION_GRPC_OFFSET

REPO = Path(__file__).resolve().parents[2]
REGIONS = ["east", "north", "south", "west"]
STARTED_LINE = "Ctrl-C stops them all."
START_S = 180.0
STOP_S = 30.0


@dataclass
class Up:
    process: "subprocess.Popen[str]"
    output: list[str]
    data_dir: Path
    grpc_port: int
    rest_port: int

    @property
    def metrics_ports(self) -> list[int]:
        """The national brain's HTTP port (after the last region's REST port), then each
        region's metrics port."""
        return [self.rest_port + len(REGIONS) + i for i in range(1 + len(REGIONS))]

    @property
    def ports(self) -> list[int]:
        return _ports(self.grpc_port, self.rest_port)


def _ports(grpc_base: int, rest_base: int) -> list[int]:
    """Every port `cnbrain up` listens on from these bases (by its defaults)."""
    grpc = [grpc_base + REGION_GRPC_OFFSET + i for i in range(len(REGIONS))]
    rest_and_metrics = [rest_base + i for i in range(2 * len(REGIONS) + 1)]
    return [grpc_base, *grpc, *rest_and_metrics]


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _port_bases() -> tuple[int, int]:
    """A gRPC base and a REST base whose every derived port is free now."""
    rng = random.Random()
    while True:
        grpc, rest = rng.randrange(20_000, 40_000), rng.randrange(40_000, 60_000)
        if all(_free(p) for p in _ports(grpc, rest)):
            return grpc, rest


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


@contextlib.contextmanager
def _up(tmp_path: Path) -> Iterator[Up]:
    grpc_port, rest_port = _port_bases()
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CNBRAIN_")}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cnbrain.cli.main",
            "up",
            "--data-dir",
            str(data_dir),
            "--grpc-port",
            str(grpc_port),
            "--rest-port",
            str(rest_port),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    up = Up(process, [], data_dir, grpc_port, rest_port)
    started = threading.Event()

    def read_output() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            up.output.append(line.rstrip())
            if line.strip() == STARTED_LINE:
                started.set()

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + START_S
        while not started.wait(0.5):
            if process.poll() is not None:
                pytest.fail(f"cnbrain up exited ({process.returncode}) before it was ready")
            if time.monotonic() > deadline:
                pytest.fail(f"cnbrain up was not ready within {START_S:.0f} s")
        yield up
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever the test left running
        process.wait()


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # the command name (in parentheses) may hold spaces: the parent follows the last ")"
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                children.append(int(stat.parent.name))
    return children


def _environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def _assert_all_stopped(up: Up) -> None:
    assert up.process.wait(timeout=STOP_S) == 0
    with contextlib.suppress(ProcessLookupError):
        os.killpg(up.process.pid, 0)
        pytest.fail("a brain of the federation still runs after cnbrain up exited")
    assert [p for p in up.ports if _listening(p)] == []


def test_up_prints_every_endpoint_places_the_readme_example_and_stops_on_ctrl_c(
    tmp_path: Path,
) -> None:
    with _up(tmp_path) as up:
        printed = "\n".join(up.output)
        assert f"national  gRPC 127.0.0.1:{up.grpc_port}" in printed
        national_http, *metrics = up.metrics_ports
        assert f"metrics http://127.0.0.1:{national_http}/metrics" in printed
        for i, region in enumerate(REGIONS):
            rest = f"REST http://127.0.0.1:{up.rest_port + i}"
            grpc = f"gRPC 127.0.0.1:{up.grpc_port + REGION_GRPC_OFFSET + i}"
            scraped = f"metrics http://127.0.0.1:{metrics[i]}/metrics"
            assert f"{region:<9} {rest}  {grpc}  {scraped}" in printed
        assert all(_listening(p) for p in up.ports)
        page = httpx.get(f"http://127.0.0.1:{metrics[0]}/metrics", timeout=30)
        assert page.status_code == 200 and 'region="east"' in page.text

        token = (up.data_dir / "admin.token").read_text().strip()
        assert up.data_dir.stat().st_mode & 0o777 == 0o700
        files = {p.name: p.stat().st_mode & 0o777 for p in up.data_dir.iterdir() if p.is_file()}
        assert {"admin.token", "peer.token", "national.db", "east.db"} <= set(files)
        assert {name: mode for name, mode in files.items() if mode != 0o600} == {}
        brains = _children(up.process.pid)
        assert len(brains) == 1 + len(REGIONS)
        for pid in brains:
            environment = _environment(pid)
            assert environment["CNBRAIN_PEER_TOKEN"]  # every brain needs that one
            assert "CNBRAIN_ADMIN_TOKEN" not in environment
            assert all(token not in value for value in environment.values())
        assert (up.data_dir / "regional.yaml").stat().st_mode & 0o777 == 0o600
        east = httpx.Client(
            base_url=f"http://127.0.0.1:{up.rest_port}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        created = east.post("/v1/tenants", json={"id": "acme", "name": "Acme"})
        assert created.status_code == 201, created.text
        # The command line finds the east's brain and the key by the context up wrote.
        context = up.data_dir / "context.json"
        assert f"the command line's context (its URL and key): {context}" in printed
        environment = {k: v for k, v in os.environ.items() if not k.startswith("CNBRAIN_")}
        made = subprocess.run(
            [sys.executable, "-m", "cnbrain.cli.main", "tenant", "create", "beta"],
            env={**environment, "CNBRAIN_CONTEXT": str(context)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert made.returncode == 0 and json.loads(made.stdout)["id"] == "beta", made.stderr
        example = json.loads((REPO / "examples/requests/gpu-training.json").read_text())
        del example["id"]
        answer = east.post("/v1/requests", json={**example, "tenant": "acme"})
        assert answer.status_code == 201, answer.text
        view = answer.json()
        assert view["state"] == "placed"
        segments = [(s["kind"], s["owner"]) for s in view["decision"]["path"]["segments"]]
        assert segments == [("source", "east"), ("backbone", "national"), ("destination", "west")]

        os.killpg(up.process.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
        _assert_all_stopped(up)


def test_sigterm_to_up_alone_stops_every_brain(tmp_path: Path) -> None:
    with _up(tmp_path) as up:
        up.process.send_signal(signal.SIGTERM)
        _assert_all_stopped(up)
