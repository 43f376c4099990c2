"""docker-compose.yml: valid for docker-compose, and wired as the federation needs (every
region of the built-in map has a brain, ports and databases are distinct, migrations run
first). docker-compose must be installed (`bash scripts/tools.sh`); nothing is skipped."""

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cnbrain.netmap.load import load_map

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
REGIONS = sorted(load_map("china").regions)
BRAINS = ["national", *REGIONS]


def _compose(*args: str, file: Path = COMPOSE) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.fail("docker-compose is not installed: run `bash scripts/tools.sh` (or `make test`)")
    return subprocess.run(
        [binary, "-f", str(file), *args],
        cwd=file.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    done = _compose("config")
    assert done.returncode == 0, done.stderr
    resolved: dict[str, Any] = yaml.safe_load(done.stdout)["services"]
    return resolved


def test_the_compose_file_is_valid() -> None:
    done = _compose("config", "-q")
    assert done.returncode == 0, done.stderr


def test_a_broken_compose_file_is_reported(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    text = COMPOSE.read_text()
    broken.write_text(text.replace("\n  migrate:\n", "\n  migrate:\n    no_such_option: 1\n", 1))
    done = _compose("config", "-q", file=broken)
    assert done.returncode != 0
    assert "no_such_option" in done.stderr


def test_every_region_of_the_built_in_map_has_a_brain(services: dict[str, Any]) -> None:
    assert set(REGIONS) == {"east", "west", "north", "south"}
    assert {"postgres", "redis", "migrate", *BRAINS} <= set(services)
    assert services["national"]["command"] == ["brain", "national"]
    for region in REGIONS:
        brain = services[region]
        assert brain["command"] == ["brain", "regional"]
        env = brain["environment"]
        assert env["CNBRAIN_REGION"] == region
        assert env["CNBRAIN_NATIONAL_ENDPOINT"] == "national:50051,national-2:50051"
        assert env["CNBRAIN_ADVERTISE_ENDPOINT"] == f"{region}:{env['CNBRAIN_GRPC_PORT']}"
        assert env["CNBRAIN_REDIS_URL"].startswith("redis://redis:6379/")


def test_brains_have_their_own_ports_databases_and_the_same_peer_token(
    services: dict[str, Any],
) -> None:
    envs = [services[b]["environment"] for b in BRAINS]
    assert services["national"]["environment"]["CNBRAIN_GRPC_PORT"] == "50051"
    assert sorted(services[r]["environment"]["CNBRAIN_GRPC_PORT"] for r in REGIONS) == [
        "50061",
        "50062",
        "50063",
        "50064",
    ]
    databases = [e["CNBRAIN_DATABASE_URL"].rsplit("/", 1)[1] for e in envs]
    assert databases == [f"cnbrain_{b}" for b in BRAINS]
    assert len({e["CNBRAIN_PEER_TOKEN"] for e in envs}) == 1
    assert all(e["CNBRAIN_GRPC_HOST"] == "0.0.0.0" for e in envs)
    published = [p["published"] for s in services.values() for p in s.get("ports", [])]
    assert len(published) == len(set(published))
    assert sorted(
        p["published"] for r in REGIONS for p in services[r]["ports"] if p["target"] == 8080
    ) == [8081, 8082, 8083, 8084]
    redis_dbs = [services[r]["environment"]["CNBRAIN_REDIS_URL"] for r in REGIONS]
    assert len(set(redis_dbs)) == len(REGIONS)


def test_the_databases_are_created_and_migrated_before_the_brains_start(
    services: dict[str, Any],
) -> None:
    init_sql = (ROOT / "deploy" / "postgres-init.sql").read_text()
    created = set(re.findall(r"CREATE DATABASE (\w+);", init_sql))
    migrate = " ".join(services["migrate"]["command"])
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for brain in BRAINS:
        assert f"cnbrain_{brain}" in created
        assert brain in migrate.split("do")[0]
        depends = services[brain]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully"
    assert "cnbrain db upgrade" in migrate


def test_the_national_brain_runs_as_two_replicas_on_one_database(
    services: dict[str, Any],
) -> None:
    first, second = services["national"], services["national-2"]
    assert first["command"] == second["command"] == ["brain", "national"]
    one, two = first["environment"], second["environment"]
    assert one["CNBRAIN_DATABASE_URL"] == two["CNBRAIN_DATABASE_URL"]
    assert (one["CNBRAIN_INSTANCE_ID"], two["CNBRAIN_INSTANCE_ID"]) == ("national-1", "national-2")
    assert one["CNBRAIN_PEER_TOKEN"] == two["CNBRAIN_PEER_TOKEN"]
    assert two["CNBRAIN_GRPC_HOST"] == "0.0.0.0"
    assert second["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_prometheus_scrapes_every_brains_metrics_listener_which_is_not_published(
    services: dict[str, Any],
) -> None:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = {
        job["job_name"]: sorted(t for c in job["static_configs"] for t in c["targets"])
        for job in config["scrape_configs"]
    }
    regional = []
    for region in REGIONS:
        env = services[region]["environment"]
        port = int(env["CNBRAIN_METRICS_PORT"])
        assert port != int(env["CNBRAIN_PORT"])  # never the REST port
        assert env["CNBRAIN_METRICS_HOST"] == "0.0.0.0"  # the compose network's
        assert port not in [p["target"] for p in services[region].get("ports", [])]
        regional.append(f"{region}:{port}")
    assert targets["cnbrain-regional"] == sorted(regional)
    national = []
    for name in ("national", "national-2"):
        port = int(services[name]["environment"]["CNBRAIN_HTTP_PORT"])
        assert port not in [p["target"] for p in services[name].get("ports", [])]
        national.append(f"{name}:{port}")
    assert targets["cnbrain-national"] == sorted(national)
