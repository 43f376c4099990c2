"""`GET /metrics` of a brain: its REST calls by route template and status, their durations,
its decisions by outcome, and the capacity its ledger holds, moving with a burst of
submissions."""

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.regional.bodies import LOCAL_CPU
from tests.regional.brain_api import Api

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOO_BIG: dict[str, Any] = {**LOCAL_CPU, "resources": {"cpu": 100_000, "memory_gib": 8}}
WITH_BANDWIDTH: dict[str, Any] = {**LOCAL_CPU, "constraints": {"min_bandwidth_gbps": 1}}


async def _samples(api: Api) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = await api.client.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


async def test_a_burst_moves_the_calls_their_durations_and_the_decisions(api: Api) -> None:
    _, _, user = await api.tenant()
    before = await _samples(api)
    for body in (LOCAL_CPU, LOCAL_CPU, WITH_BANDWIDTH, TOO_BIG):
        made = await api.call(user, "POST", "/v1/requests", json=body)
        assert made.status_code == 201, made.text
    viewed = (await api.call(user, "GET", "/v1/requests")).json()["items"][0]["id"]
    assert (await api.call(user, "GET", f"/v1/requests/{viewed}")).status_code == 200
    assert (await api.client.get("/nowhere")).status_code == 404
    after = await _samples(api)

    def moved(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    submitted = {"method": "POST", "route": "/v1/requests"}
    assert moved("cnbrain_http_requests_total", **submitted, status="201") == 4
    assert moved("cnbrain_http_request_duration_seconds_count", **submitted) == 4
    assert moved("cnbrain_http_request_duration_seconds_sum", **submitted) > 0
    one = {"method": "GET", "route": "/v1/requests/{request_id}", "status": "200"}
    assert moved("cnbrain_http_requests_total", **one) == 1
    assert moved("cnbrain_http_requests_total", method="GET", route="unmatched", status="404") == 1
    assert moved("cnbrain_decisions_total", outcome="placed") == 3
    assert moved("cnbrain_decisions_total", outcome="rejected") == 1
    assert not any(viewed in str(key) for key in after)  # no series names a request

    def used_cores(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
        total = 0.0
        for (name, labels), value in samples.items():
            if dict(labels).get("resource") == "cpu_cores":
                total += value if name == "cnbrain_site_capacity" else -value
        return total

    assert after[("cnbrain_ledger_read", ())] == 1
    assert used_cores(after) - used_cores(before) == pytest.approx(3 * 8)  # the three placed
    assert any(
        name == "cnbrain_link_utilisation" and value > 0 for (name, _), value in after.items()
    )
