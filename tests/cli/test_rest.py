"""The REST commands of the CLI against a running brain process on PostgreSQL and Redis."""

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.processes import brains_on_a_new_database

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "ck_cliadmin.0123456789abcdefghijklmnopqrstuvwxyzABCD"


@pytest.fixture(scope="module")
def brain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with brains_on_a_new_database(
        1,
        prefix="cnbrain_cli",
        map_spec="china",
        admin_token=ADMIN,
        workdir=tmp_path_factory.mktemp("cli"),
    ) as (urls, _):
        yield urls[0]


def cnbrain(url: str, token: str, *args: str, exit_status: int = 0) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "cnbrain.cli.main", *args, "--url", url, "--token", token],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == exit_status, done.stderr
    return json.loads(done.stdout) if done.stdout.startswith(("{", "[")) else done.stdout


def test_tenant_key_submit_list_show_cancel_and_events(brain: str, tmp_path: Path) -> None:
    tenant = cnbrain(brain, ADMIN, "tenant", "create", "cli-tenant", "--name", "CLI tenant")
    assert tenant["id"] == "cli-tenant"
    key = cnbrain(brain, ADMIN, "apikey", "create", "--tenant", "cli-tenant", "--name", "ana")
    token = key["token"]
    submitted = cnbrain(
        brain,
        token,
        "submit",
        str(ROOT / "examples/requests/gpu-training.json"),
        "--idempotency-key",
        "k1",
    )
    assert submitted["state"] == "placed" and submitted["tenant"] == "cli-tenant"
    again = cnbrain(
        brain,
        token,
        "submit",
        str(ROOT / "examples/requests/gpu-training.json"),
        "--idempotency-key",
        "k1",
    )
    assert again["id"] == submitted["id"]
    too_big = tmp_path / "too-big.json"
    too_big.write_text(
        json.dumps(
            {
                "source_province": "GD",
                "resources": {"cpu": 100_000, "memory_gib": 8},
                "duration_hours": 1,
            }
        )
    )
    rejected = cnbrain(brain, token, "submit", str(too_big), exit_status=1)
    assert rejected["state"] == "rejected" and rejected["reason"]
    group = cnbrain(
        brain, token, "submit-group", str(ROOT / "examples/requests/inference-replicas.json")
    )
    assert group["state"] == "placed" and len({m["site"] for m in group["requests"]}) == 3
    listing = cnbrain(brain, token, "requests", "list")
    assert submitted["id"] in listing and "placed" in listing
    shown = cnbrain(brain, token, "requests", "show", submitted["id"])
    assert shown["decision"]["site"] == submitted["site"]
    cancelled = cnbrain(brain, token, "requests", "cancel", submitted["id"])
    assert cancelled["state"] == "cancelled"
    told = cnbrain(brain, token, "requests", "events", submitted["id"], "--json")
    assert [e["kind"] for e in told["events"]] == ["submitted", "placed", "cancelled"]
    header, *lines = cnbrain(brain, token, "requests", "events", submitted["id"]).splitlines()
    assert header.split() == ["AT", "KIND", "DETAIL"]
    assert [line.split()[1] for line in lines] == ["submitted", "placed", "cancelled"]
    assert f"site={submitted['site']}" in lines[1]


def test_list_and_revoke_keys_and_disable_a_user(brain: str) -> None:
    cnbrain(brain, ADMIN, "tenant", "create", "cli-revoke")
    first = cnbrain(brain, ADMIN, "apikey", "create", "--tenant", "cli-revoke", "--name", "bo")
    user = first["user"]
    second = cnbrain(brain, ADMIN, "apikey", "create", "--user", user)
    assert requests_answer(brain, first["token"]) == 200
    revoked = cnbrain(brain, ADMIN, "apikey", "revoke", first["id"], "--user", user)
    assert revoked["id"] == first["id"] and revoked["revoked_at"]
    assert requests_answer(brain, first["token"]) == 401
    assert requests_answer(brain, second["token"]) == 200
    listed = cnbrain(brain, ADMIN, "apikey", "list", "--user", user, "-o", "json")
    assert [(k["id"], k["revoked_at"] is None) for k in listed] == [
        (first["id"], False),
        (second["id"], True),
    ]
    disabled = cnbrain(brain, ADMIN, "user", "disable", user)
    assert disabled["id"] == user and disabled["disabled_at"]
    assert requests_answer(brain, second["token"]) == 401


def requests_answer(url: str, token: str) -> int:
    """The status of listing requests with `token`."""
    return httpx.get(
        f"{url}/v1/requests", headers={"Authorization": f"Bearer {token}"}, timeout=30
    ).status_code


def test_errors_are_clear(brain: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cnbrain.cli.main",
            "requests",
            "show",
            "req-none",
            "--url",
            brain,
            "--token",
            ADMIN,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "404" in done.stderr and "req-none" in done.stderr


def test_priority_classes_list_put_delete(brain: str) -> None:
    put = cnbrain(
        brain,
        ADMIN,
        "priority-classes",
        "put",
        "cli-urgent",
        "--value",
        "950",
        "--no-preemptible",
        "--max-wait-s",
        "300",
    )
    assert put == {
        "name": "cli-urgent",
        "value": 950,
        "preemptible": False,
        "default_max_wait_s": 300.0,
        "default": False,
    }
    listed = cnbrain(brain, ADMIN, "priority-classes", "list", "--json")
    assert [one["name"] for one in listed][:2] == ["cli-urgent", "high"]
    table = cnbrain(brain, ADMIN, "priority-classes", "list")
    assert "cli-urgent" in table and "normal" in table and "default" in table
    deleted = cnbrain(brain, ADMIN, "priority-classes", "delete", "cli-urgent")
    assert "deleted priority class cli-urgent" in deleted
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "cnbrain.cli.main",
            "priority-classes",
            "delete",
            "normal",
            "--url",
            brain,
            "--token",
            ADMIN,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2 and "409" in refused.stderr and "default" in refused.stderr


def test_requests_why_shows_a_queued_requests_place_estimate_and_blockers(
    brain: str, tmp_path: Path
) -> None:
    cnbrain(brain, ADMIN, "tenant", "create", "cli-queue", "--name", "CLI queue")
    token = cnbrain(brain, ADMIN, "apikey", "create", "--tenant", "cli-queue", "--name", "q")[
        "token"
    ]
    every_h100 = {
        "source_province": "GD",
        "resources": {
            "nodes": 128,
            "cpu": 8,
            "memory_gib": 32,
            "accelerator": {"model": "H100", "count": 8},
        },
        "duration_hours": 2,
    }
    now, waits = tmp_path / "now.json", tmp_path / "queue.json"
    now.write_text(json.dumps(every_h100))
    waits.write_text(json.dumps({**every_h100, "start": "queue"}))
    holder = cnbrain(brain, token, "submit", str(now))
    assert holder["state"] == "placed", holder
    queued = cnbrain(brain, token, "submit", str(waits))
    assert queued["state"] == "queued", queued
    deadline = time.monotonic() + 30
    while "estimated start" not in (told := cnbrain(brain, token, "requests", "why", queued["id"])):
        assert time.monotonic() < deadline, told
        time.sleep(0.3)
    lines = told.splitlines()
    assert lines[0].startswith(f"{queued['id']} is queued: position 0, estimated start ")
    site = holder["site"]
    assert any(
        line.strip().startswith(
            f"{site}: wants 1024000 milli-accelerators H100, 0 free; 1024000 held"
        )
        for line in lines
    ), told
    header, *listed = cnbrain(brain, token, "queue").splitlines()
    assert header.split()[:3] == ["POSITION", "ID", "TENANT"], header
    assert listed[0].split()[:3] == ["0", queued["id"], "cli-queue"], listed
    assert cnbrain(brain, token, "queue", "--json")["items"][0]["id"] == queued["id"]
    cnbrain(brain, token, "requests", "cancel", queued["id"])
    assert "is cancelled, not waiting" in cnbrain(brain, token, "requests", "why", queued["id"])
    cnbrain(brain, token, "requests", "cancel", holder["id"])


def test_routes_and_why_show_where_a_requests_data_moves(brain: str, tmp_path: Path) -> None:
    told = cnbrain(brain, ADMIN, "routes", "SH-hub-qingpu", "NX-hub-zhongwei", "--routes", "2")
    lines = told.splitlines()
    assert lines[0].startswith("1. ") and " ms, " in lines[0], told
    assert [line.split()[:2] for line in lines[1:4]] == [
        ["source", "east"],
        ["backbone", "national"],
        ["destination", "west"],
    ], told
    assert lines[4].startswith("2. "), told
    none = cnbrain(
        brain, ADMIN, "routes", "SH-hub-qingpu", "NX-hub-zhongwei", "--min-free-gbps", "5000"
    )
    assert none.startswith("no route from SH-hub-qingpu to NX-hub-zhongwei"), none
    cnbrain(brain, ADMIN, "tenant", "create", "cli-flows", "--name", "CLI flows")
    token = cnbrain(brain, ADMIN, "apikey", "create", "--tenant", "cli-flows", "--name", "f")[
        "token"
    ]
    example = Path(__file__).resolve().parents[2] / "examples/requests/staged-training.json"
    made = cnbrain(brain, token, "submit", str(example))
    assert made["state"] == "queued", made
    deadline = time.monotonic() + 30
    while "is placed" not in (told := cnbrain(brain, token, "requests", "why", made["id"])):
        assert time.monotonic() < deadline, told
        time.sleep(0.3)
    lines = told.splitlines()
    assert lines[1].startswith("  its job starts once its staging ends, at "), told
    assert lines[2].startswith("  staging site SH-hub-qingpu: 10000 Mbps from "), told
    assert lines[3].startswith("  delivery province ZJ: 10000 Mbps from "), told
    cnbrain(brain, token, "requests", "cancel", made["id"])


def test_a_request_id_is_one_segment_of_the_path_whatever_it_holds(brain: str) -> None:
    cnbrain(brain, ADMIN, "tenant", "create", "cli-escape")
    made = cnbrain(brain, ADMIN, "apikey", "create", "--tenant", "cli-escape", "--name", "cy")
    user = made["user"]
    hostile = f"../users/{user}/disable#"
    for action in ("cancel", "show"):
        command = [sys.executable, "-m", "cnbrain.cli.main", "requests", action, hostile]
        done = subprocess.run(
            [*command, "--url", brain, "--token", ADMIN],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2 and "404" in done.stderr, done.stderr
    assert requests_answer(brain, made["token"]) == 200  # the user was not disabled


@pytest.mark.parametrize("command", [["requests", "list"], ["queue"]])
def test_a_limit_given_is_sent_whatever_it_is_and_the_api_bounds_it(
    brain: str, command: list[str]
) -> None:
    listing = [sys.executable, "-m", "cnbrain.cli.main", *command, "--limit", "0"]
    done = subprocess.run(
        [*listing, "--url", brain, "--token", ADMIN],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "422" in done.stderr and "limit" in done.stderr, done.stderr
