"""The dispatcher: hands placed requests' jobs to their sites' schedulers and follows them.

It is decoupled from submissions through the database: the placement path only leaves a
request `placed`; one background task per brain instance (`Dispatcher.start`) does, every
`execution_poll_s` (or at once after `wake`), one round:

1. take over the attempts of instances whose lease lapsed (those caught submitting are lost);
2. queue attempt 1 of every placed request with a `job`;
3. claim queued attempts and submit them to their site's backend; the request becomes
   `submitted` (an attempt the scheduler refuses or cannot take ends `not_submitted`);
4. ask the scheduler about every attempt this instance follows and move the request along:
   `running`, `suspended`, `completed` (its reservation is released in the same transaction);
   the scheduler's job of a request that was cancelled is cancelled there;
5. settle requests whose last attempt ended without completing: the next attempt on the same
   site, or, when the site's scheduler would not take the job, a new placement elsewhere
   (`cnbrain.regional.replacement`), or, once `job.max_attempts` are used, `failed` with the
   reason (and released). An attempt ended by its request's preemption counts for none of
   them (`jobs.counted`);
6. write the usage record of every ended attempt from its scheduler's accounting;
7. renew this instance's leases, and release the cross-region parts of ended requests.

Beside the rounds, a task of its own reads, every `node_report_interval_s`, what the schedulers
of sites with node pools report of their nodes (`cnbrain.regional.node_reports`), so that a
scheduler slow to answer delays no round.

Every change is a conditional update in one transaction, so several instances (replicas on one
database) never make the same change twice; each attempt is followed by one instance (its
`owner`) at a time. A simulator keeps its jobs in memory: an attempt on a simulator that
another instance (or an earlier run of this one) submitted is unknown here, and counts as a
failed (`lost`) attempt.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.background import stop_task
from cnbrain.domain.backend_ref import BackendRef
from cnbrain.domain.decision import Decision
from cnbrain.domain.events import RequestEvent, RequestEventKind
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.site import Site
from cnbrain.domain.states import ENDED_ATTEMPT, RUNNABLE, AttemptState, RequestState
from cnbrain.execution import (
    BackendError,
    BackendRejected,
    BackendUnavailable,
    Clock,
    ClusterBackend,
    CredentialStore,
    JobState,
    JobStatus,
    SystemClock,
    UnknownJob,
)
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.regional import job_outcomes
from cnbrain.regional.job_specs import job_spec
from cnbrain.regional.metering import NotMeterableError, usage_of
from cnbrain.regional.node_reports import NodeReports
from cnbrain.regional.replacement import BackendKind, PlaceElsewhere
from cnbrain.regional.settings import Settings
from cnbrain.regional.simulated_time import RealTime
from cnbrain.regional.site_backends import SiteBackends, site_ref
from cnbrain.regional.unit_of_work import CapacityChanges
from cnbrain.regional.use_cases.deciding import Decider
from cnbrain.regional.use_cases.ports import NationalClient
from cnbrain.storage import audit, jobs, registry, request_events, requests, usage
from cnbrain.storage.clock import utcnow
from cnbrain.storage.jobs import Job

log = logging.getLogger("cnbrain.regional")

JobKey = jobs.JobKey


def describe(ref: BackendRef) -> str:
    """A backend for people: "Slurm at <url>" or "simulator (nothing runs)"."""
    if ref.kind == "slurm":
        return f"Slurm at {ref.url}"
    return "simulator (nothing runs)"


def update_of(status: JobStatus) -> jobs.StatusUpdate:
    return jobs.StatusUpdate(
        state=status.state.value,
        backend_state=status.backend_state,
        message=status.message,
        exit_code=status.exit_code,
        submitted_at=status.submitted_at,
        started_at=status.started_at,
        ended_at=status.ended_at,
    )


class Dispatcher:
    """The execution side of one brain instance (see the module docstring).

    It reads and writes the brain's database through `sessions`, and every change of
    capacity (a request that ends, or moves) through the unit of work `changes`. From
    `settings` it takes its `instance_id` (it owns the attempts it follows under that name),
    the poll interval and lease of its rounds, how long it waits for accounting, how many
    decisions a re-placement may take, and whether the brain is federated. `credentials`
    are the deployment's for sites' schedulers; `map()` gives the map in use; `decider` is
    the request use cases' (re-placements decide with it) and `forget()` drops the cached
    snapshot it decides on; `national` is the link to the national brain (None: standalone)
    that cross-region parts of ended requests are released through. `clock` is the
    simulators' clock (the system's by default).

    Use `start`/`stop` around the brain's life, or `run_once` to drive it by hand; `wake`
    starts the next round at once.
    """

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        settings: Settings,
        credentials: CredentialStore,
        map: Callable[[], ComputeNetworkMap],
        changes: CapacityChanges,
        decider: Decider,
        forget: Callable[[], None],
        national: NationalClient | None,
        clock: Clock | None = None,
    ) -> None:
        self.sessions = sessions
        """The database's sessions (job control reads requests with them)."""
        self.owner = settings.instance_id
        self._poll_s = settings.execution_poll_s
        self._lease_s = settings.execution_lease_s
        self._metering_wait_s = settings.metering_wait_s
        self._map = map
        self._changes = changes
        self._national = national
        clock = clock or SystemClock()
        self.backends = SiteBackends(clock=clock, credentials=credentials)
        self.real_time = RealTime(clock)
        self._place_elsewhere = PlaceElsewhere(
            sessions=sessions,
            changes=changes,
            decider=decider,
            forget=forget,
            attempts=settings.placement_attempts,
            federated=settings.region is not None,
            backend_of=BackendKind(map),
        )
        self.node_reports = NodeReports(
            map=map,
            backend_of=self.backend_of,
            changes=changes,
            interval_s=settings.node_report_interval_s,
        )
        self._task: asyncio.Task[None] | None = None
        self._reports: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._round = asyncio.Lock()
        self._problems: dict[str, str] = {}

    # ------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Run rounds, and the reads of node reports, in the background until `stop`."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="cnbrain-dispatcher")
            self._reports = asyncio.create_task(
                self.node_reports.run_forever(), name="cnbrain-node-reports"
            )

    async def stop(self) -> None:
        """Stop the rounds and the reads and close every backend. Attempts stay in the
        database: another instance (or this one, started again) takes them over when their
        leases lapse."""
        tasks, self._task, self._reports = (self._task, self._reports), None, None
        for task in tasks:
            if task is not None:
                await stop_task(task)
        await self.backends.aclose()

    def wake(self) -> None:
        """Start the next round now instead of after the poll interval."""
        self._wake.set()

    async def _run(self) -> None:
        interval = self._poll_s
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("a dispatch round failed; the next one tries again")
            # Not wait_for: it may swallow a cancellation that comes as the event is set.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._wake.wait()
            self._wake.clear()

    async def run_once(self) -> None:
        """One round (see the module docstring); rounds never overlap."""
        async with self._round:
            await self._take_over()
            async with self.sessions.begin() as session:
                await jobs.queue_first_attempts(session)
            await self._submit_queued()
            await self._follow()
            await self._settle_stalled()
            await self._meter()
            async with self.sessions.begin() as session:
                await jobs.renew_leases(session, owner=self.owner, until=self._lease())
            await job_outcomes.release_elsewhere(self.sessions, self._national)

    # -------------------------------------------------------------------------------- helpers

    def _lease(self) -> datetime:
        return utcnow() + timedelta(seconds=self._lease_s)

    async def ref_of(self, site_id: str) -> BackendRef:
        return await site_ref(self._map(), self.sessions, site_id)

    async def backend_of(self, site_id: str) -> tuple[BackendRef, ClusterBackend]:
        """The site's backend reference and backend; `registry.UnknownItem` for a site the
        registry never had."""
        ref = await self.ref_of(site_id)
        return ref, self.backends.get(site_id, ref)

    async def _release_elsewhere(self, request_ids: list[str]) -> None:
        """The requests ended: release their cross-region parts."""
        await job_outcomes.release_elsewhere(self.sessions, self._national, request_ids=request_ids)

    # ------------------------------------------------------------------------------ take over

    async def _take_over(self) -> None:
        async with self.sessions.begin() as session:
            lost = await jobs.take_over(session, owner=self.owner, until=self._lease())
            await request_events.append_many(
                session,
                [
                    job_outcomes.attempt_ended(job, state=AttemptState.LOST, message=job.message)
                    for job in lost
                ],
            )
        for job in lost:
            log.warning("attempt %s on %s: lost while being submitted", JobKey.of(job), job.site_id)

    # --------------------------------------------------------------------------------- submit

    async def _submit_queued(self) -> None:
        async with self.sessions.begin() as session:
            claimed = await jobs.claim_queued(session, owner=self.owner, lease_until=self._lease())
        if claimed:
            await asyncio.gather(*(self._submit(job) for job in claimed))

    async def _submit(self, job: Job) -> None:
        key = JobKey.of(job)
        async with self.sessions() as session:
            record = await requests.get_request(session, tenant_id=None, request_id=job.request_id)
        if record is None or record.state not in RUNNABLE:
            state = record.state if record is not None else "gone"
            async with self.sessions.begin() as session:
                await jobs.mark_not_submitted(
                    session,
                    key,
                    backend=job.backend,
                    message=f"the request was {state} before its job was submitted",
                )
            return
        request = PlacementRequest.model_validate(record.body)
        try:
            ref, backend = await self.backend_of(job.site_id)
        except registry.UnknownItem as exc:
            await self._not_submitted(job, job.backend, f"the site is unknown: {exc}")
            return
        try:
            spec = job_spec(request, attempt=job.attempt)
            backend_job_id = await backend.submit(spec)
        except BackendUnavailable as exc:
            await self._not_submitted(job, ref.kind, f"its {describe(ref)} is unavailable: {exc}")
            return
        except BackendRejected as exc:
            await self._not_submitted(job, ref.kind, f"its {describe(ref)} refused: {exc.message}")
            return
        except (BackendError, ValueError) as exc:
            await self._not_submitted(job, ref.kind, f"its {describe(ref)} refused: {exc}")
            return
        message = f"submitted to the {describe(ref)} of site {job.site_id} as job {backend_job_id}"
        async with self.sessions.begin() as session:
            ours = await jobs.mark_submitted(
                session, key, backend=ref.kind, backend_job_id=backend_job_id, message=message
            )
            if ours:
                await jobs.advance_request(session, request_id=job.request_id, state="submitted")
                await request_events.append_many(
                    session,
                    [
                        RequestEvent.of(
                            job.request_id,
                            RequestEventKind.JOB_SUBMITTED,
                            utcnow(),
                            attempt=job.attempt,
                            site=job.site_id,
                            backend=ref.kind,
                            backend_job_id=backend_job_id,
                        )
                    ],
                )
                await audit.record(
                    session,
                    actor=job_outcomes.SYSTEM,
                    tenant_id=job.tenant_id,
                    action="job.submitted",
                    object_type="request",
                    object_id=job.request_id,
                    detail={
                        "attempt": job.attempt,
                        "site": job.site_id,
                        "backend": ref.kind,
                        "backend_job_id": backend_job_id,
                    },
                )
        if not ours:  # another instance declared it lost meanwhile: leave no stray job
            with contextlib.suppress(BackendError):
                await backend.cancel(backend_job_id)

    async def _not_submitted(self, job: Job, kind: str, why: str) -> None:
        log.warning("attempt %s on %s not submitted: %s", JobKey.of(job), job.site_id, why)
        async with self.sessions.begin() as session:
            if await jobs.mark_not_submitted(session, JobKey.of(job), backend=kind, message=why):
                await request_events.append_many(
                    session,
                    [
                        job_outcomes.attempt_ended(
                            job, state=AttemptState.NOT_SUBMITTED, message=why
                        )
                    ],
                )
                await audit.record(
                    session,
                    actor=job_outcomes.SYSTEM,
                    tenant_id=job.tenant_id,
                    action="job.not_submitted",
                    object_type="request",
                    object_id=job.request_id,
                    detail={"attempt": job.attempt, "site": job.site_id, "why": why},
                )

    # --------------------------------------------------------------------------------- follow

    async def _follow(self) -> None:
        async with self.sessions() as session:
            followed = await jobs.followed(session, owner=self.owner)
            states = await jobs.request_states(session, [j.request_id for j in followed])
        if followed:
            await asyncio.gather(
                *(self._follow_one(job, states.get(job.request_id, "gone")) for job in followed)
            )

    async def _follow_one(self, job: Job, request_state: str) -> None:
        assert job.backend_job_id is not None  # live attempts were submitted
        try:
            ref, backend = await self.backend_of(job.site_id)
            if request_state not in RUNNABLE:
                await backend.cancel(job.backend_job_id)
            status = self.real_time.status(ref, backend, await backend.status(job.backend_job_id))
        except UnknownJob as exc:
            await self.apply(
                job,
                jobs.StatusUpdate(
                    state=AttemptState.LOST,
                    backend_state="UNKNOWN",
                    message=f"the scheduler no longer knows it: {exc}",
                ),
            )
            return
        except (BackendError, registry.UnknownItem) as exc:
            self._cannot_ask(job.site_id, str(exc))
            return
        self._cannot_ask(job.site_id, None)
        if (
            status.state.value == job.state
            and status.backend_state == job.backend_state
            and (job.started_at is not None or status.started_at is None)
        ):
            return
        await self.apply(job, update_of(status))

    async def apply(
        self, job: Job, update: jobs.StatusUpdate, *, actor: str = job_outcomes.SYSTEM
    ) -> bool:
        """Record `update` of a live attempt and move its request along; True if recorded.

        running/suspended move a runnable request there; completed completes it and releases
        its reservation; any other end leaves the request for `_settle_stalled`. Each writes
        the request's event (`started`, `resumed`, `suspended`, `ended`, `attempt_ended`).
        The attempt's first start on a site whose node list is read drops the cached
        snapshot: a report that shows the job no longer counts its take twice
        (`storage.node_reports.unshown`).
        """
        if update.state == JobState.COMPLETED:
            return await self._complete(job, update)
        first_start = update.started_at is not None and job.started_at is None
        if first_start and self.node_reports.reads(job.site_id):
            async with self._changes.begin() as (session, change):
                recorded = await self._record(session, job, update, actor)
                if recorded:
                    change.free()
            return recorded
        async with self.sessions.begin() as session:
            return await self._record(session, job, update, actor)

    async def _record(
        self, session: AsyncSession, job: Job, update: jobs.StatusUpdate, actor: str
    ) -> bool:
        """`apply`'s writes, on `session`, for an update that does not complete the attempt."""
        if not await jobs.set_status(session, JobKey.of(job), update):
            return False
        if update.state in (JobState.RUNNING, JobState.SUSPENDED):
            before = await jobs.advance_request(
                session, request_id=job.request_id, state=update.state
            )
            if before is not None:
                action = "resumed" if before == RequestState.SUSPENDED else update.state
                await request_events.append_many(
                    session,
                    [
                        RequestEvent.of(
                            job.request_id,
                            _MOVE_EVENTS[action],
                            utcnow(),
                            attempt=job.attempt,
                            by=None if actor == job_outcomes.SYSTEM else actor,
                        )
                    ],
                )
                await audit.record(
                    session,
                    actor=actor,
                    tenant_id=job.tenant_id,
                    action=f"request.{action}",
                    object_type="request",
                    object_id=job.request_id,
                    detail={"attempt": job.attempt, "backend_state": update.backend_state},
                )
        elif update.state in ENDED_ATTEMPT:
            ended = job_outcomes.attempt_ended(
                job, state=update.state, message=update.message, exit_code=update.exit_code
            )
            await request_events.append_many(session, [ended])
            await audit.record(
                session,
                actor=actor,
                tenant_id=job.tenant_id,
                action=f"job.{update.state}",
                object_type="request",
                object_id=job.request_id,
                detail={"attempt": job.attempt, "message": update.message},
            )
        return True

    async def _complete(self, job: Job, update: jobs.StatusUpdate) -> bool:
        """Record the completed attempt, complete its request and release its reservation, in
        one unit of work; True if recorded."""
        released = False
        async with self._changes.begin() as (session, change):
            if not await jobs.set_status(session, JobKey.of(job), update):
                return False
            released = await job_outcomes.finish_request(
                session,
                request_id=job.request_id,
                tenant_id=job.tenant_id,
                state=RequestState.COMPLETED,
                reason=None,
                attempt=job.attempt,
            )
            if released:
                change.free()
        if released:
            await self._release_elsewhere([job.request_id])
        return True

    def _cannot_ask(self, site_id: str, problem: str | None) -> None:
        """Log a site's scheduler becoming unreachable (or reachable again) once, not at every
        round; its attempts keep their state meanwhile."""
        before = self._problems.get(site_id)
        if problem == before:
            return
        if problem is None:
            self._problems.pop(site_id, None)
            log.info("site %s: its scheduler answers again", site_id)
        else:
            self._problems[site_id] = problem
            log.warning("site %s: cannot follow its jobs now: %s", site_id, problem)

    # --------------------------------------------------------------------------------- settle

    async def _settle_stalled(self) -> None:
        async with self.sessions() as session:
            stalled = await jobs.stalled_requests(session)
        for item in stalled:
            try:
                await self._settle(item)
            except Exception:
                log.exception("request %s: could not settle its ended attempt", item.request.id)

    async def _settle(self, item: jobs.Stalled) -> None:
        request = PlacementRequest.model_validate(item.request.body)
        assert request.job is not None  # stalled requests have jobs
        last, max_attempts = item.last, request.job.max_attempts
        if item.used < max_attempts and last.state == AttemptState.NOT_SUBMITTED:
            await self._place_elsewhere(request, last=last)
            self.wake()
            return
        released = False
        async with self._changes.begin() as (session, change):
            record = await requests.get_request(
                session, tenant_id=None, request_id=request.id, for_update=True
            )
            latest = await jobs.attempts_of(session, request_id=request.id)
            if (
                record is None
                or record.state not in RUNNABLE
                or latest[-1].attempt != last.attempt
                or latest[-1].state not in ENDED_ATTEMPT
            ):
                return  # settled meanwhile
            used = jobs.counted(latest)
            if used < max_attempts:
                await job_outcomes.retry_on_same_site(
                    session, last=latest[-1], used=used, max_attempts=max_attempts
                )
            else:
                released = await job_outcomes.finish_request(
                    session,
                    request_id=request.id,
                    tenant_id=request.tenant,
                    state=RequestState.FAILED,
                    reason=job_outcomes.failure_reason(latest[-1], used, max_attempts),
                    attempt=last.attempt,
                )
                if released:
                    change.free()
        if released:
            await self._release_elsewhere([request.id])
        self.wake()

    # ---------------------------------------------------------------------------------- meter

    async def _meter(self) -> None:
        async with self.sessions() as session:
            ended = await jobs.unmetered(session, owner=self.owner)
        for job in ended:
            try:
                await self._meter_one(job)
            except Exception:
                log.exception("attempt %s: metering failed; trying again", JobKey.of(job))

    async def _meter_one(self, job: Job) -> None:
        assert job.backend_job_id is not None
        key = JobKey.of(job)
        waited = (utcnow() - _aware(job.updated_at)).total_seconds()
        late = waited > self._metering_wait_s
        try:
            ref, backend = await self.backend_of(job.site_id)
            accounting = await backend.accounting(job.backend_job_id)
            if accounting is not None:
                accounting = self.real_time.accounting(ref, backend, accounting)
        except (BackendError, registry.UnknownItem) as exc:
            if late:
                await self._unmetered(key, f"no accounting after {waited:.0f} s: {exc}")
            return
        incomplete = accounting is None or accounting.ended_at is None
        if accounting is not None and accounting.started_at is None and job.started_at:
            incomplete = True  # the accounting records a job's end before its allocation
        if incomplete:
            if late:
                await self._unmetered(key, f"no complete accounting after {waited:.0f} s")
            return
        assert accounting is not None
        async with self.sessions.begin() as session:
            record = await requests.get_request(session, tenant_id=None, request_id=job.request_id)
            decision = await requests.get_decision(session, request_id=job.request_id)
            site = await self._site(session, job.site_id)
            if record is None or site is None:
                await jobs.mark_metered(session, key, note="its request or site is gone")
                return
            try:
                metered = usage_of(
                    request=PlacementRequest.model_validate(record.body),
                    attempt=job.attempt,
                    site=site,
                    decision=Decision.model_validate(decision) if decision else None,
                    links={link.id: link for link in self._map().links},
                    accounting=accounting,
                    simulated=ref.kind == "simulator",
                )
            except NotMeterableError:
                await jobs.mark_metered(session, key)
                return
            await usage.insert(session, metered)
            await jobs.mark_metered(session, key)

    async def _site(self, session: AsyncSession, site_id: str) -> Site | None:
        cmap = self._map()
        index = cmap.site_index.get(site_id)
        if index is not None:
            return cmap.sites[index]
        return await registry.get_site(session, site_id=site_id)

    async def _unmetered(self, key: JobKey, note: str) -> None:
        log.warning("attempt %s: no usage record: %s", key, note)
        async with self.sessions.begin() as session:
            await jobs.mark_metered(session, key, note=f"not metered: {note}")


_MOVE_EVENTS: dict[str, RequestEventKind] = {
    JobState.RUNNING: RequestEventKind.STARTED,
    JobState.SUSPENDED: RequestEventKind.SUSPENDED,
    "resumed": RequestEventKind.RESUMED,
}
"""The event of a request whose job the scheduler runs, pauses, or runs again."""


def _aware(moment: datetime) -> datetime:
    """`moment` in UTC; naive times (SQLite hands them back) are UTC, as every stored time."""
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
