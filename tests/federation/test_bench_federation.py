"""`cnbrain bench federation` against the local federation: every request it sends is placed
across regions and counted once, as the tenant it made, and it leaves every ledger as it found
it (what it placed is cancelled)."""

import pytest

from cnbrain.bench.federation import bench_federation
from tests.federation.ledgers import check_invariants, unreleased
from tests.federation_processes import LocalFederation


@pytest.mark.asyncio
@pytest.mark.slow
async def test_bench_federation_places_across_regions_and_cancels_what_it_placed(
    federation: LocalFederation,
) -> None:
    figures = await bench_federation(
        url=federation.members["east"].url,
        staff_token=federation.admin_token,
        map_spec="china",
        requests=12,
        concurrency=4,
        seed=5,
    )

    assert (figures.requests, figures.errors, figures.rejected) == (12, 0, 0)
    assert figures.placed_cross_region == 12 and figures.placed_in_region == 0
    assert figures.cross_region_decisions_per_s == pytest.approx(12 / figures.seconds)
    assert 0 < figures.p50_ms <= figures.p99_ms
    for url in federation.databases.values():
        assert await unreleased(url) == []
        await check_invariants(url)
