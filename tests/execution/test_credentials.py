"""Who sets a site's scheduler, and which credential it may use: only admins change a site's
`execution`; a Slurm site names a credential of the brain's store, which must be for the
site's URL; a site stored with another URL gets no token. Real PostgreSQL and Redis
(execution_brain.py), and a real HTTP server standing in for a scheduler that must not be sent
anything.
"""

import http.server
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import pytest
import pytest_asyncio

from cnbrain.domain.backend_ref import BackendRef
from cnbrain.domain.site import Site
from cnbrain.storage import registry
from tests.execution.execution_brain import (
    SLURM,
    Brain,
    job_request,
    running_brain,
    site_registration,
)
from tests.http_server import serving

pytestmark = pytest.mark.asyncio(loop_scope="module")

SIMULATOR = {"kind": "simulator"}


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Records every request it gets, and answers 404."""

    seen: ClassVar[list[str]] = []

    def _record(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._record()

    def do_POST(self) -> None:
        self._record()

    def do_DELETE(self) -> None:
        self._record()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def recorder() -> Iterator[str]:
    """The URL of a real HTTP server that records what it is sent (`_Recorder.seen`)."""
    with serving(_Recorder) as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def brain(tmp_path_factory: Any) -> AsyncIterator[Brain]:
    async with running_brain(tmp_path_factory.mktemp("credentials")) as running:
        yield running


async def operator_key(brain: Brain) -> str:
    user = await brain.as_admin("POST", "/v1/users", json={"name": "op", "role": "operator"})
    assert user.status_code == 201, user.text
    key = await brain.as_admin("POST", f"/v1/users/{user.json()['id']}/api-keys")
    assert key.status_code == 201, key.text
    return str(key.json()["token"])


async def stored_execution(brain: Brain, site_id: str) -> BackendRef:
    async with brain.brain.sessions() as session:
        return await registry.site_execution(session, site_id=site_id)


async def test_an_operator_registers_and_updates_sites_but_never_sets_their_backend(
    brain: Brain,
) -> None:
    operator = await operator_key(brain)
    slurm_site = site_registration("AA-op-slurm", execution=SLURM)
    refused = await brain.call(operator, "POST", "/v1/sites", json=slurm_site)
    assert refused.status_code == 403, refused.text
    assert "only an admin sets a site's execution backend" in refused.json()["detail"]
    fast = site_registration("AA-op-fast", execution={"kind": "simulator", "time_scale": 60})
    assert (await brain.call(operator, "POST", "/v1/sites", json=fast)).status_code == 403
    sites = {s["id"] for s in (await brain.as_admin("GET", "/v1/sites")).json()}
    assert {"AA-op-slurm", "AA-op-fast"} & sites == set()

    plain = site_registration("AA-op", execution=SIMULATOR)
    made = await brain.call(operator, "POST", "/v1/sites", json=plain)
    assert made.status_code == 201, made.text
    site = plain["site"]
    hijack = await brain.call(operator, "PUT", "/v1/sites/AA-op", json={**site, "execution": SLURM})
    assert hijack.status_code == 403, hijack.text
    assert (await stored_execution(brain, "AA-op")).kind == "simulator"
    bigger = {**site, "capacity": {**site["capacity"], "cpu_cores": 4}}
    assert (await brain.call(operator, "PUT", "/v1/sites/AA-op", json=bigger)).status_code == 200

    set_by_admin = await brain.as_admin("PUT", "/v1/sites/AA-op", json={**site, "execution": SLURM})
    assert set_by_admin.status_code == 200, set_by_admin.text
    same = {**bigger, "execution": SLURM, "name": "renamed by an operator"}
    assert (await brain.call(operator, "PUT", "/v1/sites/AA-op", json=same)).status_code == 200
    for execution in (
        {**SLURM, "url": "http://127.0.0.1:6821"},
        {**SLURM, "user": "root"},
        SIMULATOR,
    ):
        changed = await brain.call(
            operator, "PUT", "/v1/sites/AA-op", json={**same, "execution": execution}
        )
        assert changed.status_code == 403, (execution, changed.text)
    assert await stored_execution(brain, "AA-op") == BackendRef.model_validate(SLURM)


async def test_an_admin_names_only_a_credential_of_the_store_for_the_sites_url(
    brain: Brain,
) -> None:
    cases = [
        ({**SLURM, "credential": "nope"}, "credential", "no credential 'nope'"),
        ({**SLURM, "url": "http://203.0.113.9:6820"}, "url", "only for http://127.0.0.1:6820/"),
        ({**SLURM, "url": "https://127.0.0.1:6820"}, "url", "only for"),
    ]
    for execution, field, message in cases:
        body = site_registration("AA-cred", execution=execution)
        refused = await brain.as_admin("POST", "/v1/sites", json=body)
        assert refused.status_code == 422, refused.text
        [error] = refused.json()["errors"]
        assert error["field"] == f"site.execution.{field}"
        assert message in error["message"]
    sites = {s["id"] for s in (await brain.as_admin("GET", "/v1/sites")).json()}
    assert "AA-cred" not in sites

    body = site_registration("AA-cred", execution=SIMULATOR)
    assert (await brain.as_admin("POST", "/v1/sites", json=body)).status_code == 201
    for execution, field, message in cases:
        update = {**body["site"], "execution": execution}
        refused = await brain.as_admin("PUT", "/v1/sites/AA-cred", json=update)
        assert refused.status_code == 422, refused.text
        [error] = refused.json()["errors"]
        assert error["field"] == f"execution.{field}"
        assert message in error["message"]
    assert (await stored_execution(brain, "AA-cred")).kind == "simulator"


@pytest.mark.parametrize(
    "where", [{"token_file": "/etc/shadow"}, {"token_env": "CNBRAIN_PEER_TOKEN"}]
)
async def test_a_site_naming_where_a_token_is_is_refused(
    brain: Brain, where: dict[str, str]
) -> None:
    body = site_registration("AA-where", execution={**SLURM, **where})
    refused = await brain.as_admin("POST", "/v1/sites", json=body)
    assert refused.status_code == 422, refused.text
    fields = [e["field"] for e in refused.json()["errors"]]
    assert f"site.execution.{next(iter(where))}" in fields


async def test_a_site_stored_with_another_url_gets_no_token(brain: Brain, recorder: str) -> None:
    body = site_registration("AA-stolen", execution=SIMULATOR)
    await brain.register_site(body)
    # as if the map had been written before the store changed: nothing checked this ref
    stolen = {**SLURM, "url": recorder, "timeout_s": 2}
    site = Site.model_validate({**body["site"], "execution": stolen})
    async with brain.brain.sessions.begin() as session:
        await registry.update_site(session, site=site)
    await brain.brain.live_map.reload()
    _, user = await brain.tenant_user("stolen")
    made = await brain.submit(user, job_request("AA-stolen"))
    await brain.states_until(user, made["id"], "failed", "completed")
    view = await brain.view(user, made["id"])
    assert view["state"] == "failed"
    assert "credential 'local-slurm' is only for http://127.0.0.1:6820/" in view["reason"]
    [attempt] = await brain.attempts(user, made["id"])
    assert attempt["state"] == "not_submitted"
    assert await brain.held(made["id"]) == []
    assert _Recorder.seen == []
