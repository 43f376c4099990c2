"""A regional brain process on the tiny map, as its staff use it."""

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from cnbrain.netmap.document import MapDocument
from cnbrain.netmap.files import write_map_document
from tests.processes import brains_on_a_new_database
from tests.tiny_map import tiny_map_raw


@contextlib.contextmanager
def tiny_brain(
    workdir: Path, *, prefix: str, extra_env: dict[str, str] | None = None
) -> Iterator[httpx.Client]:
    """One regional brain on the tiny map (a new PostgreSQL database named `prefix_...`, the
    test Redis, `extra_env` in its environment); staff's client of it, tenant `acme` made."""
    map_file = workdir / "tiny.yaml"
    write_map_document(MapDocument.model_validate(tiny_map_raw()), map_file)
    token = f"ck_{secrets.token_hex(8)}.{secrets.token_urlsafe(32)}"
    with (
        brains_on_a_new_database(
            1,
            prefix=prefix,
            map_spec=str(map_file),
            admin_token=token,
            workdir=workdir,
            extra_env=extra_env,
        ) as ([url], _),
        httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as client,
    ):
        made = client.post("/v1/tenants", json={"id": "acme", "name": "Acme"})
        assert made.status_code == 201, made.text
        yield client


def submit_from_aa(client: httpx.Client, *, gbps: float) -> dict[str, Any]:
    """An hour of one core for tenant acme, from AA's users with `gbps` to its site,
    submitted through `client`; the request's view."""
    answer = client.post(
        "/v1/requests",
        json={
            "tenant": "acme",
            "source_province": "AA",
            "resources": {"cpu": 1, "memory_gib": 1},
            "duration_hours": 1,
            "constraints": {"min_bandwidth_gbps": gbps},
        },
    )
    assert answer.status_code == 201, answer.text
    return dict(answer.json())
