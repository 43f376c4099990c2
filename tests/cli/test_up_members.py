"""`cnbrain up`'s federation: the national brain as one process or as replicas on one
database, each with its own id and port, which every regional brain knows; more than one
replica only on PostgreSQL."""

import subprocess
import sys
from pathlib import Path

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
