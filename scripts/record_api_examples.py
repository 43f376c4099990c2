"""Record the examples of the regional brain's API documentation from a real brain.

Starts a standalone brain in this process on a new SQLite file and the built-in map `china`,
makes one call of every operation as an operator and a tenant would, and writes what each
was sent and answered to `services/cnbrain/regional/api_examples.json`, which the brain's
OpenAPI document shows as the operation's examples (`cnbrain.regional.openapi`). Run it
again when a body or an answer changes shape; `tests/regional/test_api_docs.py` fails until
then:

    .venv/bin/python scripts/record_api_examples.py
"""

import asyncio
import json
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from cnbrain.regional.app import create_app
from cnbrain.regional.schemas import EXAMPLE_REQUEST
from cnbrain.regional.settings import Settings

OUT = Path(__file__).resolve().parents[1] / "services/cnbrain/regional/api_examples.json"
TOKEN = f"ck_admin{secrets.token_hex(4)}.{secrets.token_urlsafe(24)}"
ROOT = Path(__file__).resolve().parents[1]

SHARED_INFERENCE = json.loads((ROOT / "examples/requests/shared-gpu-inference.json").read_text())


JOB = {"command": "python train.py --epochs 3", "max_attempts": 1}

LIST_ITEMS = 5

POLL_S = 0.5
WAIT_S = 60.0


class Recorder:
    """Calls the brain and keeps, per operation (`METHOD /template`), the body sent and the
    answer of each 2xx status."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.examples: dict[str, dict[str, Any]] = {}

    async def call(
        self,
        method: str,
        template: str,
        path: str | None = None,
        *,
        body: Any = None,
        token: str = TOKEN,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        answer = await self.client.request(
            method,
            path or template,
            json=body,
            params=params,
            headers={"Authorization": f"Bearer {token}", **(headers or {})},
        )
        if not answer.is_success:
            sys.exit(f"{method} {path or template}: {answer.status_code} {answer.text[:400]}")
        entry = self.examples.setdefault(f"{method} {template}", {"responses": {}})
        if body is not None:
            entry["request"] = body
        is_json = answer.headers.get("content-type", "").startswith("application/json")
        if is_json and answer.content:
            entry["responses"][str(answer.status_code)] = answer.json()
            return answer.json()
        return None

    async def until(self, path: str, state: str) -> None:
        """Wait until the request at `path` is in `state`."""
        headers = {"Authorization": f"Bearer {TOKEN}"}
        for _ in range(int(WAIT_S / POLL_S)):
            if (await self.client.get(path, headers=headers)).json()["state"] == state:
                return
            await asyncio.sleep(POLL_S)
        sys.exit(f"{path} did not become {state} within {WAIT_S} s")


async def scenario(r: Recorder) -> None:
    """One call of every operation, in an order that gives each something to show."""
    await r.call("GET", "/healthz")
    await r.call("GET", "/readyz")

    await r.call("POST", "/v1/tenants", body={"id": "acme", "name": "Acme Robotics"})
    await r.call("GET", "/v1/tenants")
    await r.call("GET", "/v1/tenants/{tenant_id}", "/v1/tenants/acme")
    quota = {"cpu_cores": 2048, "memory_gib": 16384, "accelerators": 256, "bandwidth_gbps": 400}
    await r.call("PUT", "/v1/tenants/{tenant_id}/quota", "/v1/tenants/acme/quota", body=quota)
    await r.call("GET", "/v1/tenants/{tenant_id}/quota", "/v1/tenants/acme/quota")
    admin = await r.call(
        "POST", "/v1/users", body={"name": "Li Wei", "role": "tenant-admin", "tenant": "acme"}
    )
    keys = f"/v1/users/{admin['id']}/api-keys"
    key = await r.call("POST", "/v1/users/{user_id}/api-keys", keys)
    await r.call("GET", "/v1/users/{user_id}/api-keys", keys)
    spare = await r.call("POST", "/v1/users/{user_id}/api-keys", keys)
    await r.call("DELETE", "/v1/users/{user_id}/api-keys/{key_id}", f"{keys}/{spare['id']}")
    tenant_key = key["token"]

    await r.call("POST", "/v1/quotes", body={**EXAMPLE_REQUEST, "tenant": "acme"}, token=tenant_key)
    short = {**EXAMPLE_REQUEST, "tenant": "acme", "duration_hours": 0.001, "job": JOB}
    ended = await r.call("POST", "/v1/requests", body=short, token=tenant_key)
    long = {**EXAMPLE_REQUEST, "tenant": "acme", "job": JOB}
    once = {"Idempotency-Key": "acme-train-0001"}
    placed = await r.call("POST", "/v1/requests", body=long, token=tenant_key, headers=once)
    await r.call("POST", "/v1/requests", body=long, token=tenant_key, headers=once)
    request = f"/v1/requests/{placed['id']}"
    await r.until(request, "running")
    await r.call("GET", "/v1/requests/{request_id}", request, token=tenant_key)
    await r.call("GET", "/v1/requests/{request_id}/events", f"{request}/events", token=tenant_key)
    await r.call(
        "GET", "/v1/requests/{request_id}/attempts", f"{request}/attempts", token=tenant_key
    )
    await r.call("POST", "/v1/requests/{request_id}/suspend", f"{request}/suspend")
    await r.call("POST", "/v1/requests/{request_id}/resume", f"{request}/resume")
    await r.until(f"/v1/requests/{ended['id']}", "completed")
    group = {
        "placement": "spread",
        "scope": "site",
        "requests": [
            {**SHARED_INFERENCE, "id": f"replica-{i}", "tenant": "acme"} for i in range(2)
        ],
    }
    await r.call("POST", "/v1/request-groups", body=group, token=tenant_key)
    await r.call("GET", "/v1/requests", params={"limit": 2}, token=tenant_key)
    await r.call("GET", "/v1/queue", token=tenant_key)
    await r.call("POST", "/v1/requests/{request_id}/cancel", f"{request}/cancel", token=tenant_key)
    await r.call("GET", "/v1/usage", params={"tenant": "acme"})
    await r.call("GET", "/v1/usage/report", params={"tenant": "acme"})

    sites = await r.call("GET", "/v1/sites")
    site = next(s for s in sites if s["province"] == "NX")
    await r.call("PUT", "/v1/sites/{site_id}", f"/v1/sites/{site['id']}", body=site)
    await r.call("GET", "/v1/sites/{site_id}/nodes", f"/v1/sites/{site['id']}/nodes")
    usage = {"cpu_cores": 512, "memory_gib": 4096, "accelerators": {"A100": 32}}
    await r.call("POST", "/v1/sites/{site_id}/usage", f"/v1/sites/{site['id']}/usage", body=usage)
    await r.call("GET", "/v1/capacity/sites")
    await r.call("GET", "/v1/capacity/links")
    links = await r.call("GET", "/v1/links")
    link = next(x for x in links if site["id"] in (x["a"], x["b"]))
    new_site = {**site, "id": "NX-edge-yinchuan", "name": "Yinchuan edge"}
    access = {**link, "a" if link["a"] == site["id"] else "b": new_site["id"]}
    await r.call("POST", "/v1/sites", body={"site": new_site, "links": [access]})
    site_ids = {s["id"] for s in sites}
    node = link["a"] if link["b"] == site["id"] else link["b"]
    other_node = next(
        end
        for x in links
        for end in (x["a"], x["b"])
        if end.startswith(f"{site['province']}-") and end not in site_ids and end != node
    )
    direct = {**link, "a": other_node, "b": new_site["id"], "owner": ""}
    made = await r.call("POST", "/v1/links", body=direct)
    direct_id = f"{made['a']}--{made['b']}"
    await r.call("PUT", "/v1/links/{link_id}", f"/v1/links/{direct_id}", body=made)
    await r.call(
        "POST",
        "/v1/links/{link_id}/usage",
        f"/v1/links/{direct_id}/usage",
        body={"bandwidth_gbps": min(40, made["bandwidth_gbps"] / 2)},
    )
    await r.call(
        "PUT",
        "/v1/links/{link_id}/state",
        f"/v1/links/{direct_id}/state",
        body={"state": "down", "reason": "fibre cut between the two nodes"},
    )
    await r.call("DELETE", "/v1/links/{link_id}", f"/v1/links/{direct_id}")
    await r.call("DELETE", "/v1/sites/{site_id}", f"/v1/sites/{new_site['id']}")
    await r.call("GET", "/v1/routes", params={"from_site": site["id"], "to_site": sites[0]["id"]})
    matrix = await r.call("GET", "/v1/weight-matrix")
    await r.call("PUT", "/v1/weight-matrix", body=matrix)

    classes = await r.call("GET", "/v1/priority-classes")
    await r.call("GET", "/v1/priority-classes/{name}", f"/v1/priority-classes/{classes[0]['name']}")
    urgent = {"value": 950, "preemptible": False, "default_max_wait_s": 300}
    for _ in range(2):  # created, then replaced
        await r.call(
            "PUT", "/v1/priority-classes/{name}", "/v1/priority-classes/urgent", body=urgent
        )
    await r.call("DELETE", "/v1/priority-classes/{name}", "/v1/priority-classes/urgent")
    share = {"weight": 2, "cohort": "research"}
    for _ in range(2):  # created, then replaced
        await r.call(
            "PUT", "/v1/tenants/{tenant_id}/fair-share", "/v1/tenants/acme/fair-share", body=share
        )
    await r.call("GET", "/v1/tenants/{tenant_id}/fair-share", "/v1/tenants/acme/fair-share")
    await r.call("DELETE", "/v1/tenants/{tenant_id}/fair-share", "/v1/tenants/acme/fair-share")
    await r.call("POST", "/v1/users/{user_id}/disable", f"/v1/users/{admin['id']}/disable")
    await r.call("GET", "/v1/audit", params={"limit": 2})
    await r.call("GET", "/v1/ledger-audit")


def national_quota(examples: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The national quota's operations, which only a federation's brain answers: the same
    body as the region's quota, and the answers a member of region `east` gives."""
    body = examples["PUT /v1/tenants/{tenant_id}/quota"]["request"]
    view = examples["GET /v1/tenants/{tenant_id}/quota"]["responses"]["200"]
    use = {k: v for k, v in view.items() if k not in ("region", "national")}
    return {
        "PUT /v1/tenants/{tenant_id}/national-quota": {
            "request": body,
            "responses": {"200": {**view, "region": "east", "national": body}},
        },
        "GET /v1/tenants/{tenant_id}/national-quota": {"responses": {"200": use}},
    }


def shortened(value: Any) -> Any:
    """`value` with every list cut to its first `LIST_ITEMS` items, so that a listing of the
    whole map shows a few entries."""
    if isinstance(value, list):
        return [shortened(item) for item in value[:LIST_ITEMS]]
    if isinstance(value, dict):
        return {key: shortened(item) for key, item in value.items()}
    return value


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{tmp}/brain.db",
            admin_token=SecretStr(TOKEN),
            admin_token_file=Path(tmp) / "admin.token",
        )
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://brain") as client:
                recorder = Recorder(client)
                await scenario(recorder)
    examples = {**recorder.examples, **national_quota(recorder.examples)}
    OUT.write_text(json.dumps(shortened(examples), indent=1, sort_keys=True) + "\n")
    print(f"{len(recorder.examples)} operations recorded in {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    asyncio.run(main())
