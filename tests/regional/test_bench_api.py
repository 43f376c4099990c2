"""`cnbrain bench api` against a brain process: it counts every submission once, and leaves the
brain as it found it (what it placed is cancelled)."""

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cnbrain.bench.api import bench_api
from tests.processes import brains_on_a_new_database
from tests.regional.brain_api import ADMIN_TOKEN
from tests.regional.fifty_gpus import fifty_gpu_map


@pytest.fixture(scope="module")
def brain_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir: Path = tmp_path_factory.mktemp("bench")
    with brains_on_a_new_database(
        1,
        prefix="cnbrain_bench_api",
        map_spec=fifty_gpu_map(workdir / "map.json"),
        admin_token=ADMIN_TOKEN,
        workdir=workdir,
    ) as (urls, _):
        yield urls[0]


def test_bench_api_counts_every_submission_and_cancels_what_it_placed(brain_url: str) -> None:
    figures = asyncio.run(
        bench_api(url=brain_url, staff_token=ADMIN_TOKEN, requests=60, concurrency=6, seed=3)
    )
    assert (figures.requests, figures.concurrency) == (60, 6)
    assert figures.placed + figures.rejected + figures.errors == 60
    assert figures.errors == 0 and figures.placed > 0
    assert 0 < figures.p50_ms <= figures.p99_ms
    assert figures.submissions_per_s == pytest.approx(60 / figures.seconds)
    with httpx.Client(
        base_url=brain_url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30
    ) as admin:
        bench_tenants = [t["id"] for t in admin.get("/v1/tenants").json() if "bench" in t["id"]]
        assert len(bench_tenants) == 1
        quota = admin.get(f"/v1/tenants/{bench_tenants[0]}/quota").json()
    assert quota["used_active_requests"] == 0 and quota["used_cpu_cores"] == 0
