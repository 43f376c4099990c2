"""The audit log (filters, pages) and the weight matrix (defaults, stored rows)."""

import pytest

from cnbrain.domain.enums import WorkloadClass
from cnbrain.domain.request import ObjectiveWeights
from cnbrain.placement.weights import DEFAULT_MATRIX, WeightMatrix
from cnbrain.storage import audit, weights
from cnbrain.storage.errors import BadCursor
from tests.databases import Sessions

pytestmark = pytest.mark.asyncio


async def test_audit_entries_page_newest_first_with_filters(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        for i in range(12):
            await audit.record(
                session,
                actor="alice" if i % 2 else "operator-1",
                action="request.submitted" if i % 2 else "site.updated",
                object_type="request" if i % 2 else "site",
                object_id=f"obj-{i}",
                tenant_id="acme" if i % 2 else None,
                detail={"i": i},
            )
    seen: list[str] = []
    cursor: str | None = None
    async with sessions() as session:
        while True:
            page, cursor = await audit.list_entries(session, limit=5, cursor=cursor)
            seen += [entry.object_id for entry in page]
            if cursor is None:
                break
        mine, _ = await audit.list_entries(session, tenant_id="acme")
        sites, _ = await audit.list_entries(session, object_type="site", limit=2)
        one, _ = await audit.list_entries(session, object_id="obj-3")
        with pytest.raises(BadCursor):
            await audit.list_entries(session, cursor="!!")
    assert seen == [f"obj-{i}" for i in reversed(range(12))]
    assert [e.object_id for e in mine] == [f"obj-{i}" for i in (11, 9, 7, 5, 3, 1)]
    assert all(e.actor == "alice" and e.tenant_id == "acme" for e in mine)
    assert [e.object_id for e in sites] == ["obj-10", "obj-8"]
    assert [(e.action, e.detail) for e in one] == [("request.submitted", {"i": 3})]


async def test_weight_matrix_defaults_and_stored_rows(sessions: Sessions) -> None:
    async with sessions() as session:
        assert await weights.get_weight_matrix(session) == WeightMatrix()
    green = ObjectiveWeights(cost=0.5, latency=0.25, energy=3.0, balance=1.0)
    async with sessions.begin() as session:
        await weights.set_weight_row(session, workload_class=WorkloadClass.TRAINING, weights=green)
    async with sessions() as session:
        matrix = await weights.get_weight_matrix(session)
    assert matrix.rows[WorkloadClass.TRAINING] == green
    assert matrix.rows[WorkloadClass.BATCH] == DEFAULT_MATRIX[WorkloadClass.BATCH]
    only_batch = WeightMatrix(rows={WorkloadClass.BATCH: green})
    async with sessions.begin() as session:
        await weights.set_weight_matrix(session, matrix=only_batch)
    async with sessions() as session:
        matrix = await weights.get_weight_matrix(session)
    assert matrix.rows[WorkloadClass.BATCH] == green
    assert matrix.rows[WorkloadClass.TRAINING] == DEFAULT_MATRIX[WorkloadClass.TRAINING]
