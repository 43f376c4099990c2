"""The operator's weight matrix, one row per workload class, in the database.

Classes without a stored row use the built-in defaults (`cnbrain.placement.weights`), so an
empty table means the default matrix.
"""

from typing import cast

from sqlalchemy import Table, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.enums import WorkloadClass
from cnbrain.domain.request import ObjectiveWeights
from cnbrain.placement.weights import DEFAULT_MATRIX, WeightMatrix
from cnbrain.storage import audit
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.models import WeightRow


async def get_weight_matrix(session: AsyncSession) -> WeightMatrix:
    """The stored rows over the default matrix."""
    rows = dict(DEFAULT_MATRIX)
    for row in await session.scalars(select(WeightRow)):
        rows[WorkloadClass(row.workload_class)] = ObjectiveWeights(
            cost=row.cost, latency=row.latency, energy=row.energy, balance=row.balance
        )
    return WeightMatrix(rows=rows)


async def set_weight_row(
    session: AsyncSession, *, workload_class: WorkloadClass, weights: ObjectiveWeights
) -> None:
    """Store (or replace) the row of `workload_class`; two writers of one row at once both
    succeed, the later one kept."""
    values = {
        "cost": weights.cost,
        "latency": weights.latency,
        "energy": weights.energy,
        "balance": weights.balance,
    }
    table = cast("Table", WeightRow.__table__)
    await session.execute(
        insert_on_conflict(session, table)
        .values(workload_class=workload_class.value, **values)
        .on_conflict_do_update(index_elements=[table.c.workload_class], set_=values)
    )


async def set_weight_matrix(session: AsyncSession, *, matrix: WeightMatrix) -> None:
    """Store every row of `matrix`; classes it leaves out go back to the defaults."""
    for workload_class in WorkloadClass:
        if workload_class in matrix.rows:
            await set_weight_row(
                session, workload_class=workload_class, weights=matrix.rows[workload_class]
            )
        else:
            await reset_weight_row(session, workload_class=workload_class)


async def reset_weight_row(session: AsyncSession, *, workload_class: WorkloadClass) -> None:
    """Drop the stored row of `workload_class`: it goes back to the default."""
    row = await session.get(WeightRow, workload_class.value)
    if row is not None:
        await session.delete(row)
        await session.flush()


async def set_weight_matrix_audited(
    session: AsyncSession, *, matrix: WeightMatrix, actor: str
) -> None:
    """`set_weight_matrix`, with its audit entry (`weights.updated` by `actor`), in the
    caller's transaction."""
    await set_weight_matrix(session, matrix=matrix)
    await audit.record(
        session,
        actor=actor,
        action="weights.updated",
        object_type="weight_matrix",
        object_id="default",
        detail=matrix.model_dump(mode="json"),
    )
