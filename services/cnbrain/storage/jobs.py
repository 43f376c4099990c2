"""Attempts of requests' jobs on the sites' cluster schedulers (the `jobs` table).

An attempt is (request id, attempt number from 1). Its life:

    queued -> submitting -> pending | running | suspended -> completed | failed | timeout
                         |                                 | cancelled | lost
                         -> not_submitted

`queued`: waiting for a dispatcher; `submitting`: a dispatcher (its `owner`) is handing it to
the scheduler; pending/running/suspended: the scheduler has it (`LIVE_ATTEMPT`); the rest
are final. The states and which may follow which are the domain's (`cnbrain.domain.states`).
The owner follows an attempt until `lease_until`; once that lapses another brain instance may
take it over (`take_over`). An attempt a stopped instance was submitting is `lost`: whether the
scheduler took it cannot be known.

An attempt under way when its request is preempted is marked (`mark_preempted`: its `reason`
is `preempted`); it ends as its scheduler says (say `cancelled`), is listed with the others,
and does not count toward the job's `max_attempts` (`counted`). Attempt numbers go on
counting every attempt.

Every function works inside the caller's transaction and never commits. State changes are
conditional updates, so two instances cannot both make the same change.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Final

from sqlalchemy import and_, func, or_, select, text, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import (
    ENDED_ATTEMPT,
    LIVE_ATTEMPT,
    OPEN_ATTEMPT,
    RUNNABLE,
    AttemptState,
    RequestState,
    request_may_go,
)
from cnbrain.storage import requests
from cnbrain.storage._sql import execute_counted, fetch_scalar
from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import insert_on_conflict, on_postgresql
from cnbrain.storage.models import (
    JobRecord,
    JobStart,
    PlacementRequestRecord,
    SiteRecord,
)

__all__ = [
    "Job",
    "JobKey",
    "StatusUpdate",
    "advance_request",
    "attempts_of",
    "claim_queued",
    "counted",
    "followed",
    "get",
    "live_attempt",
    "mark_metered",
    "mark_not_submitted",
    "mark_preempted",
    "mark_submitted",
    "move_request_to_site",
    "queue_attempt",
    "queue_first_attempts",
    "renew_leases",
    "set_request_reason",
    "set_status",
    "take_over",
    "unmetered",
]

SIMULATOR_KIND = "simulator"

PREEMPTED: Final = "preempted"
"""The reason of an attempt whose request was preempted while it was under way."""

_LIVE = sorted(LIVE_ATTEMPT)
_ENDED = sorted(ENDED_ATTEMPT)


@dataclass(frozen=True, slots=True)
class Job:
    """One attempt to run a request's job on the cluster scheduler of a site, as stored (see
    the module's docstring for its states, owner and lease). `metered_at` is set once its
    usage record is written (or it is known that none will come). `reason` is why the brain
    ended it, when it did (`PREEMPTED`); None otherwise."""

    request_id: str
    attempt: int
    tenant_id: str
    site_id: str
    backend: str
    backend_job_id: str | None
    state: str
    backend_state: str | None
    message: str | None
    exit_code: int | None
    owner: str | None
    lease_until: datetime | None
    queued_at: datetime
    submitted_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    metered_at: datetime | None
    updated_at: datetime
    reason: str | None = None

    @property
    def counts(self) -> bool:
        """Whether it counts toward the job's `max_attempts`: every attempt but a preempted
        one."""
        return self.reason != PREEMPTED


def counted(attempts: Sequence[Job]) -> int:
    """How many of a request's `attempts` count toward its job's `max_attempts`."""
    return sum(1 for attempt in attempts if attempt.counts)


_JOB_FIELDS = tuple(f.name for f in fields(Job))


def _job(record: JobRecord) -> Job:
    return Job(**{name: getattr(record, name) for name in _JOB_FIELDS})


def _jobs(records: Sequence[JobRecord]) -> list[Job]:
    return [_job(record) for record in records]


@dataclass(frozen=True, slots=True)
class JobKey:
    request_id: str
    attempt: int

    @classmethod
    def of(cls, job: Job) -> "JobKey":
        return cls(job.request_id, job.attempt)

    def __str__(self) -> str:
        return f"{self.request_id}#{self.attempt}"


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    """What the scheduler says about an attempt now (`state` is one of LIVE_ATTEMPT or
    ENDED_ATTEMPT)."""

    state: str
    backend_state: str
    message: str
    exit_code: int | None = None
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None


def _key(key: JobKey) -> Any:
    return and_(JobRecord.request_id == key.request_id, JobRecord.attempt == key.attempt)


async def get(session: AsyncSession, key: JobKey) -> Job | None:
    record = await fetch_scalar(
        session, select(JobRecord).where(_key(key)).execution_options(populate_existing=True)
    )
    return None if record is None else _job(record)


async def attempts_of(session: AsyncSession, *, request_id: str) -> list[Job]:
    """Every attempt of the request, first to last."""
    rows = await session.scalars(
        select(JobRecord)
        .where(JobRecord.request_id == request_id)
        .order_by(JobRecord.attempt)
        .execution_options(populate_existing=True)
    )
    return _jobs(list(rows))


async def live_attempt(session: AsyncSession, *, request_id: str) -> Job | None:
    """The request's attempt that the scheduler has now (pending, running or suspended)."""
    record = await fetch_scalar(
        session,
        select(JobRecord)
        .where(JobRecord.request_id == request_id, JobRecord.state.in_(_LIVE))
        .order_by(JobRecord.attempt.desc())
        .execution_options(populate_existing=True),
    )
    return None if record is None else _job(record)


def _has_job(session: AsyncSession) -> Any:
    """SQL: the stored request has a `job` part (a JSON object, not null)."""
    if on_postgresql(session):
        return text("json_typeof(placement_requests.body -> 'job') = 'object'")
    return text("json_type(placement_requests.body, '$.job') = 'object'")


@dataclass(frozen=True, slots=True)
class Stalled:
    """A runnable request with a job and no attempt under way; `last` is its last attempt and
    `used` how many of its attempts count toward its `max_attempts` (`counted`)."""

    request: requests.StoredRequest
    last: Job
    used: int


async def stalled_requests(session: AsyncSession, *, limit: int = 100) -> list[Stalled]:
    """Runnable requests with a job whose attempts all ended and none completed (at most
    `limit`, least recently updated first)."""
    r, j = PlacementRequestRecord, JobRecord
    open_attempt = select(j.request_id).where(
        j.request_id == r.id, j.state.in_(sorted(OPEN_ATTEMPT))
    )
    completed = select(j.request_id).where(j.request_id == r.id, j.state == AttemptState.COMPLETED)
    any_attempt = select(j.request_id).where(j.request_id == r.id)
    found = list(
        await session.scalars(
            select(r)
            .where(
                r.state.in_(sorted(RUNNABLE)),
                _has_job(session),
                any_attempt.exists(),
                ~open_attempt.exists(),
                ~completed.exists(),
            )
            .order_by(r.updated_at, r.id)
            .limit(limit)
            .execution_options(populate_existing=True)
        )
    )
    stalled = []
    for record in found:
        attempts = await attempts_of(session, request_id=record.id)
        stalled.append(
            Stalled(request=requests.stored(record), last=attempts[-1], used=counted(attempts))
        )
    return stalled


async def save_starts(session: AsyncSession, starts: Mapping[str, datetime]) -> None:
    """Record, by request id, when each placed request's job may start (`queue_first_attempts`
    waits until then); a request's earlier start is replaced."""
    if not starts:
        return
    insert = insert_on_conflict(session, JobStart)
    await session.execute(
        insert.on_conflict_do_update(
            index_elements=[JobStart.request_id], set_={"start_at": insert.excluded.start_at}
        ),
        [{"request_id": rid, "start_at": at} for rid, at in starts.items()],
    )


async def queue_first_attempts(session: AsyncSession, *, limit: int = 100) -> int:
    """Queue attempt 1 of every placed request that has a job, no attempt yet and whose job
    may start (`save_starts`: once its data is on the site), at most `limit`, oldest first, on
    the request's site; returns how many were queued. Safe when several instances do it at
    once (the primary key keeps one row per attempt)."""
    r, s = PlacementRequestRecord, SiteRecord
    now = utcnow()
    staging = (
        select(JobStart.request_id)
        .where(JobStart.request_id == r.id, JobStart.start_at > now)
        .exists()
    )
    rows = (
        await session.execute(
            select(r.id, r.tenant_id, r.site_id, s.execution)
            .join(s, s.id == r.site_id)
            .where(
                r.state == RequestState.PLACED,
                _has_job(session),
                ~select(JobRecord.request_id).where(JobRecord.request_id == r.id).exists(),
                ~staging,
            )
            .order_by(r.updated_at, r.id)
            .limit(limit)
        )
    ).all()
    if not rows:
        return 0
    values = [
        _queued_row(request_id, tenant_id, 1, site_id, _kind(execution), now)
        for request_id, tenant_id, site_id, execution in rows
    ]
    result = await session.execute(
        insert_on_conflict(session, JobRecord)
        .on_conflict_do_nothing()
        .returning(JobRecord.request_id),
        values,
    )
    return len(result.all())


def _kind(execution: dict[str, Any] | None) -> str:
    return str((execution or {}).get("kind", SIMULATOR_KIND))


def _queued_row(
    request_id: str, tenant_id: str, attempt: int, site_id: str, backend: str, now: datetime
) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "attempt": attempt,
        "tenant_id": tenant_id,
        "site_id": site_id,
        "backend": backend,
        "state": AttemptState.QUEUED,
        "queued_at": now,
        "updated_at": now,
    }


async def with_open_attempts(session: AsyncSession, request_ids: Sequence[str]) -> set[str]:
    """Those of `request_ids` with an attempt not ended yet (queued, being submitted, or
    held by a scheduler)."""
    if not request_ids:
        return set()
    j = JobRecord
    found = await session.scalars(
        select(j.request_id)
        .where(j.request_id.in_(list(request_ids)), j.state.in_(sorted(OPEN_ATTEMPT)))
        .distinct()
    )
    return set(found)


async def mark_preempted(session: AsyncSession, request_ids: Sequence[str]) -> int:
    """Mark the attempts not ended yet of `request_ids` as preempted (module docstring), in
    the caller's transaction; returns how many were marked."""
    if not request_ids:
        return 0
    j = JobRecord
    return await execute_counted(
        session,
        update(j)
        .where(j.request_id.in_(list(request_ids)), j.state.in_(sorted(OPEN_ATTEMPT)))
        .values(reason=PREEMPTED, updated_at=utcnow()),
    )


async def queue_next_attempts(
    session: AsyncSession, request_ids: Sequence[str], *, message: str
) -> int:
    """Queue the next attempt, on its site, of each placed request of `request_ids` that has
    attempts and none open (a request placed again after it was preempted); returns how
    many were queued. Requests without attempts get their first from
    `queue_first_attempts`."""
    if not request_ids:
        return 0
    r, s, j = PlacementRequestRecord, SiteRecord, JobRecord
    ids = list(request_ids)
    last = (
        select(j.request_id, func.max(j.attempt).label("last"))
        .where(j.request_id.in_(ids))
        .group_by(j.request_id)
        .subquery()
    )
    rows = (
        await session.execute(
            select(r.id, r.tenant_id, r.site_id, s.execution, last.c.last)
            .join(s, s.id == r.site_id)
            .join(last, last.c.request_id == r.id)
            .where(r.id.in_(ids), r.state == RequestState.PLACED)
        )
    ).all()
    now = utcnow()
    values = [
        {**_queued_row(rid, tenant, last + 1, site, _kind(execution), now), "message": message}
        for rid, tenant, site, execution, last in rows
    ]
    if values:
        await session.execute(
            insert_on_conflict(session, JobRecord).on_conflict_do_nothing(), values
        )
    return len(values)


async def queue_attempt(
    session: AsyncSession,
    *,
    request_id: str,
    tenant_id: str,
    attempt: int,
    site_id: str,
    backend: str,
    message: str | None = None,
) -> None:
    """Queue attempt number `attempt` of the request on `site_id`."""
    row = _queued_row(request_id, tenant_id, attempt, site_id, backend, utcnow())
    await session.execute(insert_on_conflict(session, JobRecord).values(**row, message=message))


async def claim_queued(
    session: AsyncSession, *, owner: str, lease_until: datetime, limit: int = 50
) -> list[Job]:
    """Take up to `limit` queued attempts (oldest first) for `owner` to submit: they become
    `submitting`, owned until `lease_until`. Concurrent claims never take the same one."""
    oldest = (
        select(JobRecord.request_id, JobRecord.attempt)
        .where(JobRecord.state == AttemptState.QUEUED)
        .order_by(JobRecord.queued_at, JobRecord.request_id)
        .limit(limit)
    )
    statement = (
        update(JobRecord)
        .where(tuple_(JobRecord.request_id, JobRecord.attempt).in_(oldest))
        .where(JobRecord.state == AttemptState.QUEUED)
        .values(
            state=AttemptState.SUBMITTING, owner=owner, lease_until=lease_until, updated_at=utcnow()
        )
        .returning(JobRecord)
        .execution_options(synchronize_session=False, populate_existing=True)
    )
    return _jobs((await session.scalars(statement)).all())


async def mark_submitted(
    session: AsyncSession, key: JobKey, *, backend: str, backend_job_id: str, message: str
) -> bool:
    """The scheduler took the attempt as `backend_job_id`: it is pending. False if the
    attempt was no longer being submitted."""
    now = utcnow()
    return await _submitted_as(
        session,
        key,
        state=AttemptState.PENDING,
        backend=backend,
        backend_job_id=backend_job_id,
        backend_state="SUBMITTED",
        message=message,
        submitted_at=now,
        updated_at=now,
    )


async def mark_not_submitted(
    session: AsyncSession, key: JobKey, *, backend: str, message: str
) -> bool:
    """The scheduler refused the attempt or could not be reached: it ends `not_submitted`.
    False if the attempt was no longer being submitted."""
    now = utcnow()
    return await _submitted_as(
        session,
        key,
        state=AttemptState.NOT_SUBMITTED,
        backend=backend,
        message=message,
        ended_at=now,
        metered_at=now,
        updated_at=now,
    )


async def _submitted_as(session: AsyncSession, key: JobKey, **values: Any) -> bool:
    """Write `values` on the attempt if it is still being submitted (one conditional UPDATE,
    so a submission ends once); whether it was."""
    changed = await execute_counted(
        session,
        update(JobRecord)
        .where(_key(key), JobRecord.state == AttemptState.SUBMITTING)
        .values(**values),
    )
    return bool(changed)


async def set_status(session: AsyncSession, key: JobKey, status: StatusUpdate) -> bool:
    """Record what the scheduler says about a live attempt; False (nothing written) when the
    attempt is not live any more."""
    values: dict[str, Any] = {
        "state": status.state,
        "backend_state": status.backend_state[:64],
        "message": status.message,
        "updated_at": utcnow(),
    }
    for name in ("exit_code", "started_at", "ended_at"):
        if getattr(status, name) is not None:
            values[name] = getattr(status, name)
    if status.state in ENDED_ATTEMPT and status.ended_at is None:
        values["ended_at"] = utcnow()
    changed = await execute_counted(
        session,
        update(JobRecord).where(_key(key), JobRecord.state.in_(_LIVE)).values(**values),
    )
    return bool(changed)


async def followed(session: AsyncSession, *, owner: str) -> list[Job]:
    """The live attempts `owner` follows."""
    rows = await session.scalars(
        select(JobRecord)
        .where(JobRecord.owner == owner, JobRecord.state.in_(_LIVE))
        .order_by(JobRecord.queued_at, JobRecord.request_id)
        .execution_options(populate_existing=True)
    )
    return _jobs(list(rows))


async def unmetered(session: AsyncSession, *, owner: str) -> list[Job]:
    """`owner`'s final attempts that the scheduler had, whose usage is not recorded yet."""
    rows = await session.scalars(
        select(JobRecord)
        .where(
            JobRecord.owner == owner,
            JobRecord.state.in_(_ENDED),
            JobRecord.backend_job_id.is_not(None),
            JobRecord.metered_at.is_(None),
        )
        .order_by(JobRecord.ended_at, JobRecord.request_id)
        .execution_options(populate_existing=True)
    )
    return _jobs(list(rows))


async def mark_metered(session: AsyncSession, key: JobKey, *, note: str | None = None) -> None:
    """The attempt's usage is recorded (or, with `note`, will never be: the note says why)."""
    values: dict[str, Any] = {"metered_at": utcnow()}
    if note is not None:
        values["message"] = note
    await execute_counted(session, update(JobRecord).where(_key(key)).values(**values))


async def renew_leases(session: AsyncSession, *, owner: str, until: datetime) -> None:
    """Extend `owner`'s leases on the attempts it still has work on."""
    await execute_counted(
        session,
        update(JobRecord)
        .where(JobRecord.owner == owner, _unfinished_work())
        .values(lease_until=until),
    )


def _unfinished_work() -> Any:
    return or_(
        JobRecord.state.in_([AttemptState.SUBMITTING, *_LIVE]),
        and_(
            JobRecord.state.in_(_ENDED),
            JobRecord.backend_job_id.is_not(None),
            JobRecord.metered_at.is_(None),
        ),
    )


async def take_over(session: AsyncSession, *, owner: str, until: datetime) -> list[Job]:
    """Attempts of other owners whose lease lapsed: those being submitted become `lost`
    (returned; the dispatcher settles them like failed attempts); the live and unmetered ones
    become `owner`'s, until `until`."""
    now = utcnow()
    lapsed = or_(JobRecord.lease_until.is_(None), JobRecord.lease_until < now)
    not_mine = or_(JobRecord.owner.is_(None), JobRecord.owner != owner)
    lost = list(
        (
            await session.scalars(
                update(JobRecord)
                .where(JobRecord.state == AttemptState.SUBMITTING, lapsed, not_mine)
                .values(
                    state=AttemptState.LOST,
                    message="the brain instance that was submitting it stopped; whether the "
                    "scheduler took it is unknown",
                    ended_at=now,
                    metered_at=now,
                    updated_at=now,
                )
                .returning(JobRecord)
                .execution_options(synchronize_session=False, populate_existing=True)
            )
        ).all()
    )
    await execute_counted(
        session,
        update(JobRecord)
        .where(_unfinished_work(), JobRecord.state != AttemptState.SUBMITTING, lapsed, not_mine)
        .values(owner=owner, lease_until=until),
    )
    return _jobs(lost)


async def advance_request(
    session: AsyncSession, *, request_id: str, state: str, reason: str | None = None
) -> str | None:
    """Move the request to `state` if `REQUEST_TRANSITIONS` allow it from where it is (its
    row locked first); returns the state it left, or None when it did not move (already
    there: then only `reason` is set, when given; or the move is not allowed)."""
    record = await requests.get_request(
        session, tenant_id=None, request_id=request_id, for_update=True
    )
    if record is None:
        return None
    if record.state == state:
        if reason is not None:
            await set_request_reason(session, request_id=request_id, reason=reason)
        return None
    if not request_may_go(record.state, state):
        return None
    before = record.state
    await requests.set_states(session, [requests.StateChange(request_id, state, reason=reason)])
    return before


async def set_request_reason(session: AsyncSession, *, request_id: str, reason: str) -> None:
    """Set the request's reason (what happened to its job last), keeping its state."""
    await execute_counted(
        session,
        update(PlacementRequestRecord)
        .where(PlacementRequestRecord.id == request_id)
        .values(reason=reason, updated_at=utcnow()),
    )


async def move_request_to_site(
    session: AsyncSession, *, request_id: str, site_id: str, reason: str
) -> bool:
    """A request whose job has not ended was placed again, on `site_id` (its state stays);
    False if it has ended meanwhile."""
    r = PlacementRequestRecord
    changed = await execute_counted(
        session,
        update(r)
        .where(r.id == request_id, r.state.in_(sorted(RUNNABLE)))
        .values(site_id=site_id, reason=reason, updated_at=utcnow()),
    )
    return bool(changed)


async def request_states(session: AsyncSession, request_ids: Sequence[str]) -> dict[str, str]:
    """The state of each of `request_ids` that exists."""
    if not request_ids:
        return {}
    r = PlacementRequestRecord
    rows = await session.execute(select(r.id, r.state).where(r.id.in_(list(request_ids))))
    return {str(request_id): str(state) for request_id, state in rows.all()}
