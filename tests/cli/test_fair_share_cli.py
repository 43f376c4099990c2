"""`cnbrain tenant fair-share get|put|delete` against a running brain process on PostgreSQL
and Redis."""

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.processes import brains_on_a_new_database

ADMIN = "ck_clishares.0123456789abcdefghijklmnopqrstuvwxyzABCD"
ZERO = {"cpu_cores": 0.0, "memory_gib": 0.0, "storage_gib": 0.0, "accelerators": {}}


@pytest.fixture(scope="module")
def brain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with brains_on_a_new_database(
        1,
        prefix="cnbrain_cli_shares",
        map_spec="china",
        admin_token=ADMIN,
        workdir=tmp_path_factory.mktemp("cli-shares"),
    ) as (urls, _):
        yield urls[0]


def run(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cnbrain.cli.main", *args, "--url", url, "--token", ADMIN],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def cnbrain(url: str, *args: str) -> Any:
    done = run(url, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.startswith("{") else done.stdout


def _without_time(view: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in view.items() if name != "updated_at"}


def test_put_get_and_delete_a_tenants_fair_share(brain: str) -> None:
    cnbrain(brain, "tenant", "create", "cli-share")
    shown = cnbrain(brain, "tenant", "fair-share", "get", "cli-share")
    assert shown["weight"] == 1.0 and shown["updated_at"] is None
    put = cnbrain(
        brain,
        *("tenant", "fair-share", "put", "cli-share"),
        *("--weight", "2", "--cohort", "lab"),
        *("--nominal-cpu", "32", "--nominal-memory-gib", "128", "--nominal-storage-gib", "500"),
        *("--nominal-accelerator", "A100=8", "--nominal-accelerator", "H800=2"),
        *("--borrow-cpu", "8", "--borrow-accelerator", "A100=4"),
    )
    assert _without_time(put) == {
        "tenant": "cli-share",
        "weight": 2.0,
        "cohort": "lab",
        "nominal": {
            "cpu_cores": 32.0,
            "memory_gib": 128.0,
            "storage_gib": 500.0,
            "accelerators": {"A100": 8, "H800": 2},
        },
        "borrowing_limit": {**ZERO, "cpu_cores": 8.0, "accelerators": {"A100": 4}},
    }
    assert cnbrain(brain, "tenant", "fair-share", "get", "cli-share") == put
    replaced = cnbrain(brain, "tenant", "fair-share", "put", "cli-share", "--weight", "0.5")
    assert _without_time(replaced) == {
        "tenant": "cli-share",
        "weight": 0.5,
        "cohort": None,
        "nominal": ZERO,
        "borrowing_limit": ZERO,
    }
    deleted = cnbrain(brain, "tenant", "fair-share", "delete", "cli-share")
    assert "deleted the fair share of tenant cli-share" in deleted
    assert cnbrain(brain, "tenant", "fair-share", "get", "cli-share")["updated_at"] is None


def test_refusals_are_clear(brain: str) -> None:
    cnbrain(brain, "tenant", "create", "cli-refused")
    alone = run(brain, "tenant", "fair-share", "put", "cli-refused", "--borrow-cpu", "1")
    assert alone.returncode == 2 and "422" in alone.stderr, alone.stderr
    assert "borrowing_limit" in alone.stderr
    unknown = run(brain, "tenant", "fair-share", "get", "cli-nobody")
    assert unknown.returncode == 2 and "404" in unknown.stderr, unknown.stderr
    malformed = run(
        brain, "tenant", "fair-share", "put", "cli-refused", "--borrow-accelerator", "A100"
    )
    assert malformed.returncode == 2 and "MODEL=COUNT" in malformed.stderr, malformed.stderr
