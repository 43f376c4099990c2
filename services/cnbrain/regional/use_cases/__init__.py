"""The regional brain's use cases for requests, each in its module and each depending on
the few things it uses (the database's sessions, the unit of work for capacity, the cache,
the decider, the national link), handed to it here, once per brain."""

from dataclasses import dataclass

from cnbrain.regional.brain import Brain
from cnbrain.regional.use_cases.cancel import CancelRequest
from cnbrain.regional.use_cases.deciding import Decider
from cnbrain.regional.use_cases.intake import Intake
from cnbrain.regional.use_cases.placing import Placer
from cnbrain.regional.use_cases.quote import QuoteRequest
from cnbrain.regional.use_cases.read import ReadRequests
from cnbrain.regional.use_cases.recover import RecoverPending
from cnbrain.regional.use_cases.submit import SubmitRequest


@dataclass(frozen=True, slots=True, eq=False)
class RequestUseCases:
    submit: SubmitRequest
    quote: QuoteRequest
    cancel: CancelRequest
    read: ReadRequests
    recover: RecoverPending
    placer: Placer
    decider: Decider

    @classmethod
    def of(cls, brain: Brain) -> "RequestUseCases":
        """The use cases of a started brain."""

        def wake_jobs() -> None:
            if brain.wake_dispatcher is not None:
                brain.wake_dispatcher()

        sessions, settings = brain.sessions, brain.settings
        decider = Decider(
            snapshot=brain.snapshot,
            engine=lambda: brain.placement.engine,
            forget=brain.capacity_changed,
            lock=brain.plan_lock,
        )
        placer = Placer(
            sessions=sessions,
            changes=brain.changes,
            decider=decider,
            national=brain.national,
            forget=brain.capacity_changed,
            attempts=settings.placement_attempts,
        )
        intake = Intake(
            sessions=sessions, map=lambda: brain.placement.map, known_tenants=brain.known_tenants
        )
        read = ReadRequests(sessions)
        return cls(
            submit=SubmitRequest(
                settings=settings,
                caches=brain.caches,
                sessions=sessions,
                intake=intake,
                placer=placer,
                read=read,
            ),
            quote=QuoteRequest(intake=intake, decider=decider),
            cancel=CancelRequest(
                sessions=sessions,
                changes=brain.changes,
                national=brain.national,
                read=read,
                peer_changed=brain.peer_changed,
                wake_jobs=wake_jobs,
            ),
            read=read,
            recover=RecoverPending(sessions=sessions, placer=placer),
            placer=placer,
            decider=decider,
        )
