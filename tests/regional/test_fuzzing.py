"""The REST API under a fuzzer: a real brain process on PostgreSQL and Redis, fed cases that
schemathesis generates from the brain's own OpenAPI document, once with an admin's key and once
with a tenant user's. No case may get a server error, and every answer must be one the document
declares: its status, its media type and its schema.

Seeded and bounded (`FUZZ_EXAMPLES` cases per operation and phase), so the run is repeatable
and takes a minute or two; `docs/regional-brain.md` gives the command of the long run.
"""

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.processes import brains_on_a_new_database
from tests.regional.brain_api import ADMIN_TOKEN

FUZZ_EXAMPLES = 12
SEED = 20261201
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
)


def _schemathesis() -> str:
    beside = Path(sys.executable).parent / "st"
    found = str(beside) if beside.exists() else shutil.which("st")
    assert found, "schemathesis (`st`) is not installed; `make test` installs the dev extras"
    return found


@pytest.fixture(scope="module")
def brain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with brains_on_a_new_database(
        1,
        prefix="cnbrain_fuzz",
        map_spec="china",
        admin_token=ADMIN_TOKEN,
        workdir=tmp_path_factory.mktemp("fuzzing"),
    ) as (urls, _):
        yield urls[0]


def _tenant_user_key(url: str) -> str:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx.Client(base_url=url, headers=admin, timeout=30) as client:
        client.post("/v1/tenants", json={"id": "fuzz-tenant", "name": "Fuzz"}).raise_for_status()
        user = client.post(
            "/v1/users", json={"name": "fuzzer", "role": "tenant-user", "tenant": "fuzz-tenant"}
        )
        user.raise_for_status()
        key = client.post(f"/v1/users/{user.json()['id']}/api-keys")
        key.raise_for_status()
        token: str = key.json()["token"]
        return token


def _fuzz(url: str, token: str, workdir: Path) -> None:
    command = [
        _schemathesis(),
        "run",
        f"{url}/openapi.json",
        "--header",
        f"Authorization: Bearer {token}",
        "--max-examples",
        str(FUZZ_EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "1",
        "--checks",
        ",".join(CHECKS),
        "--generation-allow-x00",
        "true",
        "--generation-database",
        "none",
        "--request-timeout",
        "30",
        "--no-color",
    ]
    run = subprocess.run(
        command, cwd=workdir, capture_output=True, text=True, timeout=600, check=False
    )
    assert run.returncode == 0, f"the fuzzer found failures:\n{run.stdout[-12_000:]}{run.stderr}"
    assert "Test cases:" in run.stdout, run.stdout[-4_000:]


def test_no_server_error_and_every_answer_declared_for_an_admin(brain: str, tmp_path: Path) -> None:
    _fuzz(brain, ADMIN_TOKEN, tmp_path)


def test_no_server_error_and_every_answer_declared_for_a_tenant_user(
    brain: str, tmp_path: Path
) -> None:
    _fuzz(brain, _tenant_user_key(brain), tmp_path)
