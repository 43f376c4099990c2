"""The tenants' fair shares in the database: put, get and delete one tenant's, the admission
terms of all of them, and a stored row that no longer validates left out, not fatal."""

import logging
import math
from typing import Any

import pytest
from sqlalchemy import update

from cnbrain.domain import bounds
from cnbrain.domain.errors import Invalid
from cnbrain.scheduling.cohorts import TenantQuota
from cnbrain.scheduling.resources import Resources
from cnbrain.storage import fair_shares, tenants
from cnbrain.storage.errors import NotFoundError
from cnbrain.storage.fair_shares import MAX_AMOUNTS, FairShare
from cnbrain.storage.models import FairShareRecord
from tests.databases import Sessions

pytestmark = pytest.mark.asyncio

NOMINAL = Resources.of(cpu_m=64_000, mem_mib=262_144, accelerators={"A100": 8})
BORROW = Resources.of(cpu_m=16_000, accelerators={"A100": 4})


async def _tenants(sessions: Sessions, *ids: str) -> None:
    async with sessions.begin() as session:
        for tenant_id in ids:
            await tenants.create_tenant(session, tenant_id=tenant_id, name=tenant_id)


async def _put(sessions: Sessions, tenant_id: str, share: FairShare) -> bool:
    async with sessions.begin() as session:
        return await fair_shares.put_share(session, tenant_id, share)


async def _get(sessions: Sessions, tenant_id: str) -> FairShare | None:
    async with sessions() as session:
        return await fair_shares.get_share(session, tenant_id)


async def _terms(sessions: Sessions) -> fair_shares.AdmissionTerms:
    async with sessions() as session:
        return await fair_shares.admission_terms(session)


async def test_put_get_replace_and_delete_one_tenants_share(sessions: Sessions) -> None:
    await _tenants(sessions, "acme", "other")
    assert await _get(sessions, "acme") is None
    first = FairShare(weight=2.5, cohort="research", nominal=NOMINAL, borrowing_limit=BORROW)
    assert await _put(sessions, "acme", first)
    stored = await _get(sessions, "acme")
    assert stored == first
    assert stored is not None and stored.updated_at is not None
    assert stored.updated_at.tzinfo is not None
    assert stored.quota == TenantQuota(nominal=NOMINAL, borrowing_limit=BORROW)
    replaced = FairShare(weight=0.25)
    assert not await _put(sessions, "acme", replaced)
    assert await _get(sessions, "acme") == replaced
    assert await _get(sessions, "other") is None
    async with sessions.begin() as session:
        assert await fair_shares.delete_share(session, "acme")
    async with sessions.begin() as session:
        assert not await fair_shares.delete_share(session, "acme")
    assert await _get(sessions, "acme") is None


async def test_put_for_an_unknown_tenant_is_not_found(sessions: Sessions) -> None:
    with pytest.raises(NotFoundError, match="tenant 'nobody' does not exist"):
        await _put(sessions, "nobody", FairShare(weight=2))
    assert await _terms(sessions) == fair_shares.AdmissionTerms()


async def test_the_largest_amounts_come_back_exactly(sessions: Sessions) -> None:
    await _tenants(sessions, "big")
    largest = Resources({**MAX_AMOUNTS, "accelerator:H800": bounds.MAX_QUOTA_ACCELERATORS})
    share = FairShare(
        weight=float(bounds.MAX_WEIGHT), cohort="c", nominal=largest, borrowing_limit=largest
    )
    await _put(sessions, "big", share)
    stored = await _get(sessions, "big")
    assert stored is not None
    assert stored.nominal.amounts == largest.amounts
    assert stored.borrowing_limit.amounts == largest.amounts
    assert stored.weight == bounds.MAX_WEIGHT


async def test_admission_terms_hold_weights_cohorts_and_members(sessions: Sessions) -> None:
    await _tenants(sessions, "a", "b", "c", "d", "e")
    await _put(
        sessions,
        "a",
        FairShare(weight=2, cohort="research", nominal=NOMINAL, borrowing_limit=BORROW),
    )
    await _put(sessions, "b", FairShare(cohort="research", nominal=Resources.of(cpu_m=32_000)))
    await _put(sessions, "c", FairShare(weight=0.5))
    await _put(sessions, "e", FairShare(cohort="ops"))
    terms = await _terms(sessions)
    assert terms.weights == {"a": 2.0, "b": 1.0, "c": 0.5, "e": 1.0}
    assert terms.cohort_of == {"a": "research", "b": "research", "e": "ops"}
    assert sorted(terms.cohorts) == ["ops", "research"]
    research = terms.cohorts["research"]
    assert research.name == "research"
    assert research.members == ("a", "b")
    assert research.quota("a") == TenantQuota(nominal=NOMINAL, borrowing_limit=BORROW)
    assert research.quota("b") == TenantQuota(nominal=Resources.of(cpu_m=32_000))
    # a borrows b's idle CPU within its limit, and no more than its limit
    usage = {"a": NOMINAL}
    assert research.can_admit("a", Resources.of(cpu_m=16_000), usage).verdict == "borrowing"
    assert research.can_admit("a", Resources.of(cpu_m=16_001), usage).verdict == "refused"
    assert terms.cohorts["ops"].members == ("e",)


@pytest.mark.parametrize(
    "values",
    [
        {"weight": -1.0},
        {"weight": 0.0},
        {"weight": float(bounds.MAX_WEIGHT) * 2},
        {"cohort": "has space"},
        {"cohort": None, "borrowing_limit": {"cpu_m": 1}},
        {"nominal": {"cpu_m": "lots"}},
        {"nominal": {"cpu_m": -5}},
        {"nominal": {"gpus": 3}},
        {"nominal": {"cpu_m": MAX_AMOUNTS["cpu_m"] + 1}},
        {"nominal": [1, 2]},
    ],
)
async def test_a_stored_row_that_no_longer_validates_is_left_out_and_logged(
    sessions: Sessions, caplog: pytest.LogCaptureFixture, values: dict[str, Any]
) -> None:
    await _tenants(sessions, "good", "bad")
    good = FairShare(weight=3, cohort="lab", nominal=NOMINAL)
    await _put(sessions, "good", good)
    await _put(sessions, "bad", FairShare(weight=2, cohort="lab", borrowing_limit=BORROW))
    async with sessions.begin() as session:
        await session.execute(
            update(FairShareRecord).where(FairShareRecord.tenant_id == "bad").values(**values)
        )
    with caplog.at_level(logging.WARNING, logger="cnbrain.storage"):
        terms = await _terms(sessions)
        assert await _get(sessions, "bad") is None
    assert terms.weights == {"good": 3.0}
    assert terms.cohort_of == {"good": "lab"}
    assert terms.cohorts["lab"].members == ("good",)
    assert await _get(sessions, "good") == good
    warnings = [r.getMessage() for r in caplog.records if r.name == "cnbrain.storage"]
    assert len(warnings) == 2, warnings
    assert all("tenant 'bad' is not valid" in message for message in warnings)
    async with sessions.begin() as session:  # and it can still be replaced
        assert not await fair_shares.put_share(session, "bad", FairShare(weight=4))
    assert (await _terms(sessions)).weights == {"good": 3.0, "bad": 4.0}


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"weight": 0}, "weight"),
        ({"weight": -2}, "weight"),
        ({"weight": math.nan}, "weight"),
        ({"weight": math.inf}, "weight"),
        ({"weight": bounds.MAX_WEIGHT + 1}, "weight"),
        ({"weight": True}, "weight"),
        ({"cohort": ""}, "cohort"),
        ({"cohort": "-first"}, "cohort"),
        ({"cohort": "a/b"}, "cohort"),
        ({"cohort": "x" * 64}, "cohort"),
        ({"cohort": "tab\t"}, "cohort"),
        ({"borrowing_limit": Resources.of(cpu_m=1)}, "borrowing_limit"),
        ({"nominal": Resources({"gpus": 1})}, "nominal.gpus"),
        ({"nominal": Resources.of(cpu_m=-1)}, "nominal.cpu_m"),
        ({"nominal": Resources.of(mem_mib=MAX_AMOUNTS["mem_mib"] + 1)}, "nominal.mem_mib"),
        (
            {
                "cohort": "c",
                "borrowing_limit": Resources.of(
                    accelerators={"A100": bounds.MAX_QUOTA_ACCELERATORS * 1000 + 1}
                ),
            },
            "borrowing_limit.accelerator:A100",
        ),
        ({"nominal": {"cpu_m": 1}}, "nominal"),
    ],
)
async def test_a_share_out_of_bounds_is_invalid_naming_the_field(
    values: dict[str, Any], field: str
) -> None:
    with pytest.raises(Invalid) as raised:
        FairShare(**values)
    assert raised.value.field == field
