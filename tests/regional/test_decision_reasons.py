"""The reason label of a decision: a path the data plane could not steer counts as
`steering`, not as a quota's refusal."""

from cnbrain.domain.decision import STEERING_REASON, DecisionStatus
from cnbrain.domain.states import RequestState
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine
from cnbrain.regional.decision_reasons import REASONS, reason_of
from tests.tiny_map import request


def test_a_rejection_for_steering_is_counted_apart_from_a_quota(
    tiny_map: ComputeNetworkMap,
) -> None:
    [placed] = PlacementEngine(tiny_map).place_batch([request()], reserve=False)
    assert placed.site is not None
    refused = {"status": DecisionStatus.REJECTED, "reservation_id": None}
    steering = placed.model_copy(update={**refused, "reason": STEERING_REASON})
    quota = placed.model_copy(update={**refused, "reason": "the tenant's quota is used up"})

    assert reason_of(RequestState.REJECTED, steering) == "steering"
    assert reason_of(RequestState.REJECTED, quota) == "quota"
    assert "steering" in REASONS
