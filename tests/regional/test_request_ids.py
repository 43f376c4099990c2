"""Every answer of the REST API names its call in `x-request-id`: the caller's own id when it
is usable, else a new one; errors too, and those refused before any route."""

import pytest

from tests.regional.brain_api import Api

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_every_answer_names_its_call(api: Api) -> None:
    first = await api.client.get("/healthz")
    second = await api.client.get("/healthz")
    ids = [answer.headers["x-request-id"] for answer in (first, second)]
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids) and ids[0] != ids[1]

    given = await api.client.get("/healthz", headers={"x-request-id": "trace-7:abc_1.2"})
    assert given.headers["x-request-id"] == "trace-7:abc_1.2"
    for unusable in ("x" * 129, "has space", "tab\there"):
        made = await api.client.get("/healthz", headers={"x-request-id": unusable})
        assert len(made.headers["x-request-id"]) == 32, unusable

    missing = await api.client.get("/v1/requests/nothing-here")
    assert missing.status_code == 401 and len(missing.headers["x-request-id"]) == 32
    too_large = await api.client.post(
        "/v1/requests",
        content=b"x" * (api.brain.settings.max_body_bytes + 1),
        headers={"x-request-id": "big-1"},
    )
    assert too_large.status_code == 413 and too_large.headers["x-request-id"] == "big-1"
    assert too_large.headers.get_list("x-request-id") == ["big-1"]
