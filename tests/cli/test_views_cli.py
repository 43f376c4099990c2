"""The command line's views of a running brain process (PostgreSQL and Redis): tenants and
keys, sites and links, quotes, the queue, a request's events (followed as they come), usage
and the request listing, each as a table (default and `-o wide`) and as the API's JSON."""

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.processes import brains_on_a_new_database

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "ck_cliviews.0123456789abcdefghijklmnopqrstuvwxyzABCD"
BEIJING_A100 = {
    "source_province": "BJ",
    "resources": {
        "nodes": 2,
        "cpu": 8,
        "memory_gib": 64,
        "accelerator": {"model": "A100", "count": 6},
    },
    "constraints": {"regions_allowed": ["BJ"], "min_bandwidth_gbps": 10},
    "duration_hours": 1,
}
"""Two nodes of 6 A100 each and 10 Gbps: only BJ-dc-1 has A100 in Beijing (32 of them)."""
EVERY_H100 = {
    "source_province": "GD",
    "resources": {
        "nodes": 128,
        "cpu": 8,
        "memory_gib": 32,
        "accelerator": {"model": "H100", "count": 8},
    },
    "duration_hours": 2,
}
"""Every H100 of the map: one placed, the next must wait in the queue."""


@pytest.fixture(scope="module")
def brain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with brains_on_a_new_database(
        1,
        prefix="cnbrain_cli_views",
        map_spec="china",
        admin_token=ADMIN,
        workdir=tmp_path_factory.mktemp("cli-views"),
    ) as (urls, _):
        yield urls[0]


def run(url: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cnbrain.cli.main", *args, "--url", url, "--token", token],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def cnbrain(url: str, token: str, *args: str, exit_status: int = 0) -> Any:
    """The command's output: parsed when it is JSON, else its text; never anything on
    standard error."""
    done = run(url, token, *args)
    assert done.returncode == exit_status, done.stderr
    assert done.stderr == "", done.stderr
    return json.loads(done.stdout) if done.stdout.startswith(("{", "[")) else done.stdout


def table(text: str) -> tuple[list[str], list[list[str]]]:
    """A printed table's header (split on two blanks or more) and rows (split on blanks)."""
    header, *rows = text.splitlines()
    return [h for h in header.split("  ") if h.strip()], [row.split() for row in rows]


def named(headers: list[str]) -> list[str]:
    return [h.strip() for h in headers]


def tenant_user(url: str, tenant: str) -> str:
    """A new tenant and the API key of a user of it."""
    cnbrain(url, ADMIN, "tenants", "create", tenant)
    key: str = cnbrain(url, ADMIN, "keys", "create", "--tenant", tenant, "--name", "u")["token"]
    return key


def api(url: str, token: str, method: str, path: str, **kwargs: Any) -> Any:
    answer = httpx.request(
        method, f"{url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=30, **kwargs
    )
    assert answer.status_code < 300, answer.text
    return answer.json()


def eventually(what: Callable[[], Any], description: str, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := what()):
        assert time.monotonic() < deadline, description
        time.sleep(0.3)
    return found


def test_requests_help_lists_its_actions() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cnbrain.cli.main", "requests", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    listed = [
        line.split()[0]
        for line in done.stdout.splitlines()
        if line.startswith("    ") and not line[4].isspace()
    ]
    assert listed == ["list", "show", "cancel", "events", "why"], done.stdout


def test_tenants_and_keys(brain: str) -> None:
    made = cnbrain(brain, ADMIN, "tenants", "create", "cli-views", "--name", "CLI views")
    assert made["id"] == "cli-views"
    headers, rows = table(cnbrain(brain, ADMIN, "tenants", "list"))
    assert named(headers) == ["ID", "NAME", "AGE"]
    assert next(r for r in rows if r[0] == "cli-views")[:3] == ["cli-views", "CLI", "views"]
    headers, _ = table(cnbrain(brain, ADMIN, "tenants", "list", "-o", "wide"))
    assert named(headers) == ["ID", "NAME", "AGE", "CREATED"]
    assert cnbrain(brain, ADMIN, "tenants", "list", "-o", "json") == api(
        brain, ADMIN, "GET", "/v1/tenants"
    )

    first = cnbrain(brain, ADMIN, "keys", "create", "--tenant", "cli-views", "--name", "ana")
    user = first["user"]
    second = cnbrain(brain, ADMIN, "keys", "create", "--user", user)
    cnbrain(brain, ADMIN, "keys", "revoke", first["id"], "--user", user)
    headers, rows = table(cnbrain(brain, ADMIN, "keys", "list", "--user", user))
    assert named(headers) == ["ID", "USER", "STATUS", "AGE"]
    assert [r[:3] for r in rows] == [
        [first["id"], user, "revoked"],
        [second["id"], user, "active"],
    ]
    headers, rows = table(cnbrain(brain, ADMIN, "keys", "list", "--user", user, "-o", "wide"))
    assert named(headers) == ["ID", "USER", "STATUS", "AGE", "CREATED", "REVOKED"]
    assert rows[0][5].startswith("20") and rows[1][5] == "-"
    listed = cnbrain(brain, ADMIN, "keys", "list", "--user", user, "-o", "json")
    assert listed == api(brain, ADMIN, "GET", f"/v1/users/{user}/api-keys")
    tenant_key = cnbrain(brain, ADMIN, "keys", "create", "--tenant", "cli-views")["token"]
    refused = run(brain, tenant_key, "tenants", "list")
    assert refused.returncode == 2 and "403" in refused.stderr, refused.stderr


def test_sites_and_links_show_what_a_request_takes(brain: str) -> None:
    printed = cnbrain(brain, ADMIN, "sites", "--province", "BJ")
    headers, rows = table(printed)
    assert named(headers) == [
        "SITE",
        "PROVINCE",
        "KIND",
        "CPU FREE/ALL",
        "MEM GIB FREE/ALL",
        "ACCELERATORS FREE/ALL",
        "UTIL",
    ]
    assert rows and all(row[1] == "BJ" for row in rows)
    beijing = next(line for line in printed.splitlines() if line.startswith("BJ-dc-1 "))
    assert "A100 32/32" in beijing and beijing.endswith(" 0%"), beijing
    with_a100 = cnbrain(brain, ADMIN, "sites", "--model", "A100", "-o", "json")
    every = api(brain, ADMIN, "GET", "/v1/capacity/sites")
    assert with_a100 == [s for s in every if "A100" in s["capacity"]["accelerators"]]
    assert cnbrain(brain, ADMIN, "sites", "-o", "json") == every
    headers, _ = table(cnbrain(brain, ADMIN, "sites", "-o", "wide"))
    assert named(headers)[-3:] == ["REGION", "STORAGE GIB FREE/ALL", "NAME"]

    token = tenant_user(brain, "cli-sites")
    made = api(brain, token, "POST", "/v1/requests", json=BEIJING_A100)
    assert made["site"] == "BJ-dc-1", made
    path = {hop["link"] for seg in made["decision"]["path"]["segments"] for hop in seg["hops"]}
    printed = cnbrain(brain, ADMIN, "sites", "--province", "BJ")
    beijing = next(line for line in printed.splitlines() if line.startswith("BJ-dc-1 "))
    assert "A100 20/32" in beijing, beijing

    headers, rows = table(cnbrain(brain, ADMIN, "links", "--busy", "0.0001"))
    assert named(headers) == ["LINK", "A", "B", "LAYER", "GBPS", "USED GBPS", "UTIL"]
    assert {row[0] for row in rows} == path
    assert all(row[5] == "10.0" for row in rows)
    backbone = cnbrain(brain, ADMIN, "links", "--layer", "backbone", "-o", "json")
    assert backbone and {link["layer"] for link in backbone} == {"backbone"}
    headers, _ = table(cnbrain(brain, ADMIN, "links", "-o", "wide"))
    assert named(headers)[-3:] == ["FREE GBPS", "OWNER", "LATENCY MS"]
    api(brain, token, "POST", f"/v1/requests/{made['id']}/cancel")
    assert cnbrain(brain, ADMIN, "links", "--busy", "0.0001").splitlines()[1:] == []
    refused = run(brain, token, "sites")
    assert refused.returncode == 2 and "403" in refused.stderr, refused.stderr


def test_a_quote_shows_the_choice_and_its_alternatives_and_reserves_nothing(
    brain: str, tmp_path: Path
) -> None:
    token = tenant_user(brain, "cli-quote")
    example = str(ROOT / "examples/requests/gpu-training.json")
    answer = cnbrain(brain, token, "quote", example, "-o", "json")
    site = answer["decision"]["site"]
    assert answer["decision"]["status"] == "placed" and answer["alternatives"]
    first, second, blank, *rest = cnbrain(brain, token, "quote", example).splitlines()
    assert first.startswith(f"{site} (province {answer['decision']['province']}, ")
    assert first.endswith("; nothing is reserved")
    assert second.startswith("cost ") and " CNY" in second and blank == ""
    headers, rows = table("\n".join(rest))
    assert named(headers) == ["RANK", "SITE", "OBJECTIVE", "SCORE"]
    assert rows[0][:2] == ["1", site]
    assert [row[1] for row in rows[1:]] == [
        c["site"]
        for c in sorted(
            answer["alternatives"], key=lambda c: (c["objective"] is None, c["objective"] or 0)
        )
    ]
    wide = cnbrain(brain, token, "quote", example, "-o", "wide").splitlines()
    assert named(table("\n".join(wide[3:]))[0])[-1] == "VS CHOSEN"
    assert api(brain, token, "GET", "/v1/requests")["items"] == []

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
    told = cnbrain(brain, token, "quote", str(too_big), exit_status=1)
    assert told.startswith("no site fits: ")


def test_the_queue_shows_class_position_and_wait(brain: str, tmp_path: Path) -> None:
    token = tenant_user(brain, "cli-queue")
    now, low, normal = tmp_path / "now.json", tmp_path / "low.json", tmp_path / "normal.json"
    now.write_text(json.dumps({**EVERY_H100, "priority_class": "high"}))  # never preempted
    low.write_text(json.dumps({**EVERY_H100, "start": "queue", "priority_class": "low"}))
    normal.write_text(json.dumps({**EVERY_H100, "start": "queue"}))
    holder = cnbrain(brain, token, "submit", str(now))
    assert holder["state"] == "placed", holder
    later = cnbrain(brain, token, "submit", str(low))
    first = cnbrain(brain, token, "submit", str(normal))
    assert later["state"] == first["state"] == "queued"

    def planned() -> list[dict[str, Any]] | None:
        items: list[dict[str, Any]] = cnbrain(brain, token, "queue", "-o", "json")["items"]
        return items if len(items) == 2 else None

    items = eventually(planned, "both queued requests planned")
    assert [(i["id"], i["priority_class"]) for i in items] == [
        (first["id"], None),
        (later["id"], "low"),
    ]
    headers, rows = table(cnbrain(brain, token, "queue"))
    assert named(headers) == ["POSITION", "ID", "TENANT", "CLASS", "WAITING", "STARTS IN", "SITE"]
    assert [row[:4] for row in rows] == [
        ["0", first["id"], "cli-queue", "(default)"],
        ["1", later["id"], "cli-queue", "low"],
    ]
    assert all(row[4][-1] in "smhd" and row[4][0].isdigit() for row in rows), rows
    headers, rows = table(cnbrain(brain, token, "queue", "-o", "wide"))
    assert named(headers)[-4:] == ["SUBMITTED", "ESTIMATED START", "PLANNED", "REASON"]
    assert cnbrain(brain, token, "queue", "--json")["items"][0]["id"] == first["id"]
    for request in (first, later, holder):
        cnbrain(brain, token, "requests", "cancel", request["id"])
    assert table(cnbrain(brain, token, "queue"))[1] == []


def _lines_of(process: subprocess.Popen[str]) -> "queue.Queue[str | None]":
    """The lines `process` prints, as they come (None at its end)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_events_of_a_request_and_following_them(brain: str) -> None:
    token = tenant_user(brain, "cli-events")
    made = cnbrain(brain, token, "submit", str(ROOT / "examples/requests/gpu-training.json"))
    follower = subprocess.Popen(
        [
            *(sys.executable, "-m", "cnbrain.cli.main", "events", made["id"], "--follow"),
            *("--interval", "0.2", "--url", brain, "--token", token),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = _lines_of(follower)
    seen = [lines.get(timeout=60) for _ in range(3)]
    assert seen[0] is not None and seen[0].split() == ["AT", "KIND", "DETAIL"]
    assert [line.split()[1] for line in seen[1:] if line] == ["submitted", "placed"]
    assert follower.poll() is None  # the request is placed: it goes on following
    cnbrain(brain, token, "requests", "cancel", made["id"])
    last = lines.get(timeout=60)
    assert last is not None and last.split()[1] == "cancelled", last
    assert lines.get(timeout=60) is None and follower.wait(timeout=60) == 0
    assert follower.stderr is not None and follower.stderr.read() == ""
    kind = seen[0].index("KIND")
    assert seen[1] is not None and seen[1].index("submitted") == kind == last.index("cancelled")

    told = api(brain, token, "GET", f"/v1/requests/{made['id']}/events")
    assert cnbrain(brain, token, "events", made["id"], "-o", "json") == told
    headers, rows = table(cnbrain(brain, token, "events", made["id"], "-o", "wide"))
    assert named(headers) == ["AT", "KIND", "AGE", "DETAIL"]
    assert [row[1] for row in rows] == ["submitted", "placed", "cancelled"]
    ended = run(brain, token, "events", made["id"], "--follow", "-o", "json")
    assert ended.returncode == 0, ended.stderr
    assert [json.loads(line) for line in ended.stdout.splitlines()] == told["events"]


def test_usage_of_a_tenants_jobs(brain: str) -> None:
    token = tenant_user(brain, "cli-usage")
    job = {
        "source_province": "ZJ",
        "resources": {"cpu": 2, "memory_gib": 4},
        "duration_hours": 1,
        "job": {"command": "sleep 3600", "max_attempts": 1},
    }
    made = api(brain, token, "POST", "/v1/requests", json=job)
    assert made["state"] == "placed", made
    eventually(
        lambda: api(brain, token, "GET", f"/v1/requests/{made['id']}")["state"] == "running",
        "the job runs",
    )
    cnbrain(brain, token, "requests", "cancel", made["id"])
    report = eventually(
        lambda: (r := cnbrain(brain, token, "usage", "-o", "json"))["rows"] and r,
        "the cancelled job metered",
    )
    assert [(row["tenant"], row["site"], row["records"]) for row in report["rows"]] == [
        ("cli-usage", made["site"], 1)
    ]
    headers, rows = table(cnbrain(brain, token, "usage"))
    assert named(headers) == ["TENANT", "SITE", "JOBS", "CPU CORE-H", "ACCEL-H", "COST CNY"]
    assert [row[:3] for row in rows] == [["cli-usage", made["site"], "1"]]
    headers, rows = table(cnbrain(brain, ADMIN, "usage", "--tenant", "cli-usage", "-o", "wide"))
    assert named(headers)[6:] == ["SIMULATED", "ELAPSED", "MEM GIB-H", "COMPUTE CNY", "NETWORK CNY"]
    assert [row[:3] for row in rows] == [["cli-usage", made["site"], "1"]]
    assert rows[0][6] == "yes"
    later = cnbrain(brain, token, "usage", "--from", "2099-01-01", "--to", "2099-02-01")
    assert table(later)[1] == []
    refused = run(brain, token, "usage", "--from", "yesterday")
    assert refused.returncode == 2 and "is not an ISO 8601 date" in refused.stderr


def test_the_request_listing(brain: str) -> None:
    token = tenant_user(brain, "cli-list")
    made = cnbrain(brain, token, "submit", str(ROOT / "examples/requests/gpu-training.json"))
    headers, rows = table(cnbrain(brain, token, "requests", "list"))
    assert named(headers) == ["ID", "STATE", "SITE", "AGE", "REASON"]
    assert rows == [[made["id"], "placed", made["site"], rows[0][3], "-"]]
    headers, rows = table(cnbrain(brain, token, "requests", "list", "-o", "wide"))
    assert named(headers) == [
        "ID",
        "STATE",
        "SITE",
        "AGE",
        "TENANT",
        "CLASS",
        "POLICY",
        "COST CNY",
        "LATENCY MS",
        "CREATED",
        "UPDATED",
        "REASON",
    ]
    assert rows[0][4:7] == ["cli-list", "(default)", made["decision"]["policy"]]
    assert float(rows[0][7].replace(",", "")) == pytest.approx(
        made["decision"]["outcome"]["cost_cny"], abs=0.01
    )
    page = cnbrain(brain, token, "requests", "list", "-o", "json")
    assert page == api(brain, token, "GET", "/v1/requests")
    assert table(cnbrain(brain, token, "requests", "list", "--state", "queued"))[1] == []
    cnbrain(brain, token, "requests", "cancel", made["id"])
