"""The regional brain's use cases for requests, each in its module and each depending on
the few things it uses (the database's sessions, the unit of work for capacity, the cache,
the decider, the national link), handed to it by `RequestUseCases.build`, once per brain."""

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.cache.base import Caches
from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.steered_paths import Steered
from cnbrain.regional.settings import Settings
from cnbrain.regional.unit_of_work import CapacityChanges
from cnbrain.regional.use_cases.admit import AdmitQueued
from cnbrain.regional.use_cases.attempts import ListAttempts
from cnbrain.regional.use_cases.cancel import CancelRequest
from cnbrain.regional.use_cases.cohort_quota import CohortQuotas
from cnbrain.regional.use_cases.deciding import Decider
from cnbrain.regional.use_cases.events import ListEvents
from cnbrain.regional.use_cases.groups import SubmitGroup
from cnbrain.regional.use_cases.intake import Intake
from cnbrain.regional.use_cases.make_room import MakeRoom
from cnbrain.regional.use_cases.placing import Placer
from cnbrain.regional.use_cases.ports import NationalClient
from cnbrain.regional.use_cases.preempt import RequeueVictims
from cnbrain.regional.use_cases.quote import QuoteRequest
from cnbrain.regional.use_cases.read import ReadRequests
from cnbrain.regional.use_cases.recover import RecoverPending
from cnbrain.regional.use_cases.site_routes import ReadSiteRoutes
from cnbrain.regional.use_cases.submit import Decided, SubmitRequest


@dataclass(frozen=True, slots=True, eq=False)
class RequestUseCases:
    submit: SubmitRequest
    submit_group: SubmitGroup
    quote: QuoteRequest
    cancel: CancelRequest
    read: ReadRequests
    recover: RecoverPending
    attempts: ListAttempts
    events: ListEvents
    placer: Placer
    decider: Decider
    admit: AdmitQueued
    make_room: MakeRoom
    routes: ReadSiteRoutes

    @classmethod
    def build(
        cls,
        *,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        caches: Caches,
        live_map: LiveMap,
        changes: CapacityChanges,
        decider: Decider,
        national: NationalClient | None,
        peer_changed: Callable[[], None],
        wake_jobs: Callable[[], None],
        wake_admission: Callable[[], None],
        cohorts: CohortQuotas | None = None,
        decided: Decided | None = None,
        preempted: Callable[[int], None] | None = None,
        steered: Steered | None = None,
    ) -> "RequestUseCases":
        """The use cases of one brain, each handed only what it uses. `decided` is told of
        every new request decided (`SubmitRequest`), `preempted` of every preemption
        (`RequeueVictims`); `steered` (None: the brain steers nothing) steers what the
        placer and the admission rounds reserve and removes what a cancel releases."""
        placer = Placer(
            sessions=sessions,
            changes=changes,
            decider=decider,
            national=national,
            forget=live_map.capacity_changed,
            attempts=settings.placement_attempts,
            queued=wake_admission,
            cohorts=cohorts,
            steered=steered,
        )
        intake = Intake(
            sessions=sessions,
            map=lambda: live_map.map,
            max_queued=settings.max_queued_per_tenant,
        )
        read = ReadRequests(sessions)
        preempt = RequeueVictims(
            sessions=sessions, changes=changes, wake_jobs=wake_jobs, requeued=preempted
        )
        return cls(
            submit=SubmitRequest(
                settings=settings,
                caches=caches,
                sessions=sessions,
                intake=intake,
                placer=placer,
                read=read,
                decided=decided,
            ),
            submit_group=SubmitGroup(
                settings=settings,
                caches=caches,
                sessions=sessions,
                intake=intake,
                decider=decider,
                placer=placer,
                forget=live_map.capacity_changed,
                federated=national is not None,
                decided=decided,
            ),
            quote=QuoteRequest(
                intake=intake,
                decider=decider,
                caches=caches,
                limit_per_minute=settings.rate_limit_per_minute,
                forget=live_map.capacity_changed,
                national=national,
            ),
            cancel=CancelRequest(
                sessions=sessions,
                changes=changes,
                national=national,
                read=read,
                peer_changed=peer_changed,
                wake_jobs=wake_jobs,
                steered=steered,
            ),
            read=read,
            attempts=ListAttempts(sessions),
            events=ListEvents(sessions),
            recover=RecoverPending(sessions=sessions, placer=placer),
            placer=placer,
            decider=decider,
            admit=AdmitQueued(
                sessions=sessions,
                live_map=live_map,
                changes=changes,
                national=national,
                top_n=settings.admission_top_n,
                wake_jobs=wake_jobs,
                preempt=preempt,
                ask_every_s=settings.admission_interval_s,
                steered=steered,
            ),
            make_room=MakeRoom(sessions=sessions, live_map=live_map, preempt=preempt),
            routes=ReadSiteRoutes(live_map=live_map, national=national),
        )
