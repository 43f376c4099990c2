"""`cnbrain up`'s federation: the national brain as one process or as replicas on one
database, each with its own id and port, which every regional brain knows; more than one
replica only on PostgreSQL; every brain's metrics on a port of its own; ports that clash or
do not exist refused before anything starts."""

import subprocess
import sys
from pathlib import Path

import pytest

from cnbrain.cli.federation import REGION_GRPC_OFFSET, federation_members

REGIONS = ["east", "west"]


def test_one_national_brain_by_default(tmp_path: Path) -> None:
    members = federation_members(REGIONS, tmp_path, "china", national_grpc_port=50051)
    assert [m.name for m in members] == ["national", "east", "west"]
    national = members[0]
    assert national.environment["CNBRAIN_INSTANCE_ID"] == "national-1"
    assert national.environment["CNBRAIN_GRPC_PORT"] == "50051"
    for region in members[1:]:
        assert region.environment["CNBRAIN_NATIONAL_ENDPOINT"] == "127.0.0.1:50051"


def test_national_replicas_share_the_database_and_every_region_knows_them(
    tmp_path: Path,
) -> None:
    databases = {name: f"postgresql+asyncpg://h/cnbrain_{name}" for name in ["national", *REGIONS]}
    members = federation_members(
        REGIONS, tmp_path, "china", databases, national_grpc_port=50051, national_replicas=3
    )
    replicas = members[:3]
    assert [m.name for m in replicas] == ["national-1", "national-2", "national-3"]
    assert [m.grpc_port for m in replicas] == [50051, 50052, 50053]
    assert {m.environment["CNBRAIN_DATABASE_URL"] for m in replicas} == {databases["national"]}
    assert [m.environment["CNBRAIN_INSTANCE_ID"] for m in replicas] == [m.name for m in replicas]
    assert all(m.rest_port is None for m in replicas)
    for i, region in enumerate(members[3:]):
        assert region.grpc_port == 50051 + REGION_GRPC_OFFSET + i
        assert region.environment["CNBRAIN_NATIONAL_ENDPOINT"] == (
            "127.0.0.1:50051,127.0.0.1:50052,127.0.0.1:50053"
        )


def test_replicas_need_postgres_and_are_bounded(tmp_path: Path) -> None:
    for extra, says in [
        ([], "--national-replicas above 1 needs --postgres"),
        (["--postgres", "postgresql://x@127.0.0.1:1/db", "--national-replicas", "9"], "invalid"),
    ]:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "cnbrain.cli.main",
                "up",
                "--data-dir",
                str(tmp_path / "up"),
                *(extra or ["--national-replicas", "2"]),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode != 0
        assert says in done.stderr, done.stderr


def test_the_national_brain_serves_its_metrics_after_the_regions_rest_ports(
    tmp_path: Path,
) -> None:
    members = federation_members(REGIONS, tmp_path, "china", first_rest_port=9001)
    national = members[0]
    assert national.http_port == 9003  # after the west's 9002
    assert national.environment["CNBRAIN_HTTP_PORT"] == "9003"
    assert all(m.http_port is None for m in members[1:])
    databases = {name: f"postgresql+asyncpg://h/cnbrain_{name}" for name in ["national", *REGIONS]}
    replicas = federation_members(
        REGIONS, tmp_path, "china", databases, national_replicas=2, national_http_port=7000
    )[:2]
    assert [m.environment["CNBRAIN_HTTP_PORT"] for m in replicas] == ["7000", "7001"]


def test_each_region_serves_its_metrics_after_the_national_brains_ports(tmp_path: Path) -> None:
    members = federation_members(REGIONS, tmp_path, "china", first_rest_port=9001)
    assert [m.metrics_port for m in members] == [None, 9004, 9005]  # after the national 9003
    assert [m.environment.get("CNBRAIN_METRICS_PORT") for m in members] == [None, "9004", "9005"]
    databases = {name: f"postgresql+asyncpg://h/cnbrain_{name}" for name in ["national", *REGIONS]}
    replicas = federation_members(
        REGIONS, tmp_path, "china", databases, national_replicas=2, national_http_port=7000
    )
    assert [m.metrics_port for m in replicas[2:]] == [7002, 7003]
    chosen = federation_members(REGIONS, tmp_path, "china", first_metrics_port=9500)
    assert [m.metrics_port for m in chosen[1:]] == [9500, 9501]


@pytest.mark.parametrize(
    ("ports", "says"),
    [
        ((50051, 8081, 8082, None), "port 8082 is west's and national's"),
        ((50051, 8081, None, 50062), "port 50062 is west's and east's"),
        ((50051, 8081, None, 8083), "port 8083 is east's and national's"),
        ((50051, 65534, None, None), "national's port 65536 is not from 1 to 65535"),
        ((50051, 8081, 65535, None), "east's port 65536 is not from 1 to 65535"),
        ((0, 8081, None, None), "national's port 0 is not from 1 to 65535"),
    ],
)
def test_ports_that_clash_or_do_not_exist_are_refused(
    tmp_path: Path, ports: tuple[int, int, int | None, int | None], says: str
) -> None:
    """`ports`: the national gRPC port, the first REST port, the national HTTP port and the
    first metrics port (None: the default)."""
    grpc, rest, http, metrics = ports
    with pytest.raises(ValueError) as refused:
        federation_members(
            REGIONS,
            tmp_path,
            "china",
            national_grpc_port=grpc,
            first_rest_port=rest,
            national_http_port=http,
            first_metrics_port=metrics,
        )
    assert says in str(refused.value)


def test_up_refuses_ports_that_clash_before_it_starts_anything(tmp_path: Path) -> None:
    up = [sys.executable, "-m", "cnbrain.cli.main", "up", "--data-dir", str(tmp_path / "up")]
    done = subprocess.run(
        [*up, "--national-http-port", "8081"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "cnbrain up: port 8081 is" in done.stderr, done.stderr
    assert not (tmp_path / "up" / "east.db").exists()
