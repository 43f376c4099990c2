"""What a round stores for the queue's view (`regional.use_cases.queue_view`): a request
planned to start now that was not admitted says why, with no estimated start, the engine's
rejection that names its site (`admit.why_not_on`); one admitted gets no plan."""

from datetime import UTC, datetime

from cnbrain.domain.decision import Decision, DecisionStatus, Explanation, Rejection
from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.ledger.keys import ResourceKey, site_key
from cnbrain.regional.use_cases.admission_inputs import Queued
from cnbrain.regional.use_cases.admit import why_not_on
from cnbrain.regional.use_cases.queue_view import Blockers, plans_of
from cnbrain.scheduling.admission import Round
from cnbrain.scheduling.backfill import Planned, PlanOption

NOW = 1_800_000_000
CPU: ResourceKey = site_key(0, "cpu_m")


def _queued(request_id: str) -> Queued:
    request = PlacementRequest.model_validate(
        {
            "id": request_id,
            "tenant": "acme",
            "source_province": "BJ",
            "resources": {"cpu": 1, "memory_gib": 1},
            "duration_hours": 1,
        }
    )
    return Queued(request, datetime.fromtimestamp(NOW, UTC), NOW + 600, "default")


def test_a_request_planned_to_start_now_but_not_admitted_says_why() -> None:
    ids = ("refused", "admitted")
    result = Round(
        order=list(ids),
        admit=[Planned(i, 0, Window(NOW, NOW + 3600), starts_now=True) for i in ids],
    )
    calendar = Calendar({CPU: 4000}, now=NOW)
    why = "no node pool of the site has the request's nodes free (at most 0 (BJ-dc-1))"
    plans, events = plans_of(
        result,
        deferred={"refused": why},
        elsewhere=[],
        national_plans={},
        earlier={},
        by_id={i: _queued(i) for i in ids},
        options={i: (PlanOption("BJ-dc-1", {CPU: 1000}),) for i in ids},
        blockers=Blockers(calendar, [], []),
        at=datetime.fromtimestamp(NOW, UTC),
    )
    assert events == []
    (plan,) = plans
    assert (plan.request_id, plan.position, plan.estimated_start) == ("refused", 0, None)
    assert plan.detail["site"] == "BJ-dc-1"
    assert plan.detail["reason"] == f"planned to start now on BJ-dc-1, not admitted: {why}"


def test_why_a_request_decided_on_its_planned_site_alone_was_not_placed() -> None:
    def refused(*messages: str) -> Decision:
        rejections = tuple(
            Rejection(
                plugin="node_pools", code="unschedulable", reason="no nodes", message=m, sites=1
            )
            for m in messages
        )
        explanation = Explanation(
            sites_total=2,
            sites_feasible=0,
            rejections=rejections,
            local_first="none",
            candidates=(),
            solver_status="none",
            optimal=True,
            timings_ms={},
        )
        return Decision(
            request_id="r",
            status=DecisionStatus.REJECTED,
            policy="topn-cpsat",
            reason="no site meets the hard constraints",
            explanation=explanation,
        )

    both = refused("at most 0 such nodes free (BJ-dc-10)", "at most 1 such nodes free (BJ-dc-1)")
    assert why_not_on(both, "BJ-dc-1") == "no nodes (at most 1 such nodes free (BJ-dc-1))"
    other = refused("at most 0 such nodes free (BJ-dc-10)")
    assert why_not_on(other, "BJ-dc-1") == "no site meets the hard constraints"
