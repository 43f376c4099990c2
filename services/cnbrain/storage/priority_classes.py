"""The operators' priority classes (`cnbrain.scheduling.classes`) in the database.

Once a brain has started, the table holds a valid set: `seed_if_empty` stores the built-in
classes (`BUILT_IN`) into an empty table, and the writes keep the set's rules, refusing with
`ClassConflict` (a Conflict) what would break them: names and values are unique, exactly one
class is the default, and a class that requests not yet ended name is not deleted. Writes take
turns (an advisory lock on PostgreSQL, the write lock on SQLite), so each checks the set as it
stands.

Reads return `PriorityClass` values; `list_classes` the whole set, with its default.
"""

from typing import Final

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.errors import Conflict, Internal
from cnbrain.domain.states import ENDED_REQUEST
from cnbrain.scheduling.classes import BUILT_IN, PriorityClass, PriorityClasses
from cnbrain.storage._sql import execute_counted, fetch_scalar
from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import advisory_lock
from cnbrain.storage.errors import NotFoundError, StorageError
from cnbrain.storage.models import PlacementRequestRecord, PriorityClassRecord

__all__ = [
    "BUILT_IN",
    "ClassConflict",
    "delete_class",
    "get_class",
    "list_classes",
    "put_class",
    "refuse_if_named",
    "replace_classes",
    "requests_naming",
    "seed_if_empty",
]

CLASSES_LOCK: Final = 0x636E_6272_0C1A
"""PostgreSQL advisory lock held by every write of the classes."""


_ENDED = sorted(str(state) for state in ENDED_REQUEST)


class ClassConflict(StorageError, Conflict):  # noqa: N818 (a kind of Conflict)
    """The change would break a rule of the set (a value taken, no default left, a class
    deleted that requests name)."""


def _class(record: PriorityClassRecord) -> PriorityClass:
    return PriorityClass(
        name=record.name,
        value=record.value,
        preemptible=record.preemptible,
        default_max_wait_s=record.default_max_wait_s,
    )


async def list_classes(session: AsyncSession) -> PriorityClasses | None:
    """The stored set (its classes highest value first) with its default; None while the
    table is empty (a database the brain has not prepared yet)."""
    records = list(await session.scalars(select(PriorityClassRecord)))
    if not records:
        return None
    defaults = [record.name for record in records if record.is_default]
    if len(defaults) != 1:
        raise Internal(f"the stored priority classes have {len(defaults)} defaults: {defaults}")
    return PriorityClasses((_class(record) for record in records), default=defaults[0])


async def get_class(session: AsyncSession, *, name: str) -> PriorityClass | None:
    """The class called `name`, or None."""
    record = await session.get(PriorityClassRecord, name)
    return None if record is None else _class(record)


async def put_class(session: AsyncSession, one: PriorityClass, *, default: bool) -> bool:
    """Store `one`, a new class or the replacement of the class of its name; True when it is
    new. `default` True makes it the default class (the former default no longer is).

    Raises ClassConflict, storing nothing, when another class has its value, and when
    `default` is False for the current default class or for the first class stored: the set
    would have no default."""
    await advisory_lock(session, CLASSES_LOCK)
    holder = await fetch_scalar(
        session,
        select(PriorityClassRecord.name).where(
            PriorityClassRecord.value == one.value, PriorityClassRecord.name != one.name
        ),
    )
    if holder is not None:
        raise ClassConflict(f"value: {one.value} is already the value of class {holder!r}")
    record = await session.get(PriorityClassRecord, one.name)
    if not default:
        if record is not None and record.is_default:
            raise ClassConflict(
                f"class {one.name!r} is the default; make another class the default first"
            )
        if record is None and await _is_empty(session):
            raise ClassConflict(f"class {one.name!r} is the first class: it must be the default")
    if default:
        await execute_counted(
            session,
            update(PriorityClassRecord)
            .where(PriorityClassRecord.is_default, PriorityClassRecord.name != one.name)
            .values(is_default=False, updated_at=utcnow()),
        )
    created = record is None
    if record is None:
        record = PriorityClassRecord(name=one.name)
        session.add(record)
    record.value = one.value
    record.preemptible = one.preemptible
    record.default_max_wait_s = one.default_max_wait_s
    record.is_default = default
    record.updated_at = utcnow()
    await session.flush()
    return created


async def delete_class(session: AsyncSession, *, name: str) -> None:
    """Delete the class called `name`. Raises NotFoundError when there is none, and
    ClassConflict, deleting nothing, when it is the default class or requests that have not
    ended name it (their count is in the message)."""
    await advisory_lock(session, CLASSES_LOCK)
    record = await session.get(PriorityClassRecord, name)
    if record is None:
        raise NotFoundError(f"priority class {name!r} does not exist")
    if record.is_default:
        raise ClassConflict(f"class {name!r} is the default; make another class the default first")
    await refuse_if_named(session, name=name)
    await session.delete(record)
    await session.flush()


async def refuse_if_named(session: AsyncSession, *, name: str) -> None:
    """Raise ClassConflict when requests of this database that have not ended name class
    `name` (their count is in the message): it may not be deleted yet."""
    naming = await requests_naming(session, name=name)
    if naming:
        raise ClassConflict(
            f"class {name!r} is named by {naming} request(s) that have not ended; "
            "delete it once they have"
        )


async def requests_naming(session: AsyncSession, *, name: str) -> int:
    """How many requests not yet ended (in any state but a final one) name class `name`."""
    body_class = PlacementRequestRecord.body["priority_class"].as_string()
    count = await fetch_scalar(
        session,
        select(func.count())
        .select_from(PlacementRequestRecord)
        .where(PlacementRequestRecord.state.not_in(_ENDED), body_class == name),
    )
    return int(count or 0)


async def seed_if_empty(session: AsyncSession, *, classes: PriorityClasses = BUILT_IN) -> bool:
    """Store `classes` (by default the built-in ones) unless a class is stored; True if it
    stored them. Safe when several replicas start at once: they take turns on the lock."""
    await advisory_lock(session, CLASSES_LOCK)
    if not await _is_empty(session):
        return False
    _add_all(session, classes)
    await session.flush()
    return True


async def replace_classes(session: AsyncSession, classes: PriorityClasses) -> bool:
    """Make the stored set `classes` (the federation's, in a regional brain that follows the
    national brain's); True when it differed. Requests that name a class it drops keep their
    name and are classed as the default (`PriorityClasses.named_or_default`)."""
    await advisory_lock(session, CLASSES_LOCK)
    stored = await list_classes(session)
    if stored is not None and stored.digest() == classes.digest():
        return False
    await session.execute(delete(PriorityClassRecord))
    _add_all(session, classes)
    await session.flush()
    return True


def _add_all(session: AsyncSession, classes: PriorityClasses) -> None:
    now = utcnow()
    session.add_all(
        PriorityClassRecord(
            name=one.name,
            value=one.value,
            preemptible=one.preemptible,
            default_max_wait_s=one.default_max_wait_s,
            is_default=one.name == classes.default.name,
            updated_at=now,
        )
        for one in classes
    )


async def _is_empty(session: AsyncSession) -> bool:
    return await fetch_scalar(session, select(PriorityClassRecord.name).limit(1)) is None
