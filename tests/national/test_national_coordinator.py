"""The two-phase-commit coordinator over participants that answer as told: one call per
owner and step for a batch, a failed part fails only its plan (all of whose parts are then
released), and releases an owner could not take are made again later."""

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import pytest

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import Claim, FlowHold
from cnbrain.ledger.reservation import ComputeClaim, Reservation
from cnbrain.national.coordinator import Commitment, Coordinator, Participant
from cnbrain.national.planner import Part, Plan
from tests.ledger.windows import HOUR

pytestmark = pytest.mark.asyncio


class Ledger:
    """A participant that records its calls and refuses or fails as told."""

    def __init__(self, region: str | None) -> None:
        self.region = region
        self.calls: list[tuple[str, list[str]]] = []
        self.refuse: set[str] = set()
        self.down = False
        self.flows: list[list[FlowHold]] = []
        self.kept: list[bool] = []

    def _answer(self, step: str, ids: list[str]) -> list[str | None]:
        self.calls.append((step, ids))
        if self.down:
            raise PeerUnavailable(self.region or "national", "unavailable", "down")
        return ["no room" if rid in self.refuse else None for rid in ids]

    async def prepare(
        self, claims: Sequence[Claim], *, ttl_ms: int, flows: Sequence[FlowHold] = ()
    ) -> list[str | None]:
        self.flows.append(list(flows))
        return self._answer("prepare", [c.reservation_id for c in claims])

    async def commit(self, commitments: Sequence[Commitment]) -> list[str | None]:
        return self._answer("commit", [c.reservation_id for c in commitments])

    async def release(
        self, reservation_ids: Sequence[str], reason: str, *, keep_delivery: bool = False
    ) -> None:
        self.kept.append(keep_delivery)
        self._answer("release", list(reservation_ids))


def _plan(
    item: int, owners: Sequence[str], flows: dict[str, tuple[FlowHold, ...]] | None = None
) -> Plan:
    """Plan `item` with a part in each of `owners`, holding the `flows` given for its owner."""
    rid = f"r{item}"
    claim = Claim(rid, f"q{item}", "t", None, 0, 0, 0, None, 0, (), 0, HOUR, counts_quota=False)
    decision = Decision(request_id=f"q{item}", status=DecisionStatus.PLACED, policy="p")
    compute = ComputeClaim(site=0, cpu_m=0, mem_mib=0, storage_gib=0)
    return Plan(
        item=item,
        decision=decision,
        reservation=Reservation(rid, f"q{item}", compute, (), 0),
        parts=[
            Part(owner=owner, claim=claim, flows=(flows or {}).get(owner, ())) for owner in owners
        ],
    )


def _flow(rid: str, kind: str, link: str) -> FlowHold:
    return FlowHold(rid, kind, "peer", (link,), 100, Window(HOUR.end, HOUR.end + 600))


def _commitment(plan: Plan) -> Commitment:
    return Commitment(plan.reservation.id, {}, "{}", {}, "{}")


@pytest.fixture
def ledgers() -> dict[str, Ledger]:
    return {"national": Ledger(None), "east": Ledger("east"), "west": Ledger("west")}


async def retry_until(
    coordinator: Coordinator, done: Callable[[], Awaitable[bool]], *, tries: int = 100
) -> None:
    """Let `coordinator` make its owed releases again every 10 ms until `done` (or `tries`
    times 10 ms have passed)."""
    retrying = asyncio.create_task(coordinator.retry_releases_forever(interval_s=0.01))
    try:
        for _ in range(tries):
            await asyncio.sleep(0.01)
            if await done():
                break
    finally:
        retrying.cancel()


def _coordinator(ledgers: dict[str, Ledger]) -> Coordinator:
    participants: dict[str, Participant] = dict(ledgers)
    return Coordinator(participants.get, ttl_ms=1_000)


async def test_a_batch_takes_one_prepare_and_one_commit_per_owner(
    ledgers: dict[str, Ledger],
) -> None:
    coordinator = _coordinator(ledgers)
    plans = [_plan(0, ["east", "national", "west"]), _plan(1, ["west", "national", "east"])]
    assert await coordinator.prepare(plans) == {}
    assert await coordinator.commit(plans, {p.item: _commitment(p) for p in plans}) == {}
    for ledger in ledgers.values():
        assert ledger.calls == [("prepare", ["r0", "r1"]), ("commit", ["r0", "r1"])]


async def test_a_refused_part_fails_its_plan_alone_and_releases_its_parts_everywhere(
    ledgers: dict[str, Ledger],
) -> None:
    coordinator = _coordinator(ledgers)
    ledgers["west"].refuse.add("r1")
    ledgers["national"].refuse.add("r2")
    plans = [_plan(i, ["east", "national", "west"]) for i in range(3)]
    failures = await coordinator.prepare(plans)
    assert sorted(failures) == [1, 2]
    assert str(failures[1]) == "prepare in 'west': no room" and failures[1].region == "west"
    assert str(failures[2]) == "prepare in 'national': no room" and failures[2].region is None
    for ledger in ledgers.values():
        assert ledger.calls == [("prepare", ["r0", "r1", "r2"]), ("release", ["r1", "r2"])]


async def test_an_owner_that_does_not_answer_fails_every_plan_it_has_a_part_of(
    ledgers: dict[str, Ledger],
) -> None:
    coordinator = _coordinator(ledgers)
    plans = [_plan(0, ["east", "national", "west"]), _plan(1, ["east", "national"])]
    assert await coordinator.prepare(plans) == {}
    ledgers["west"].down = True
    failures = await coordinator.commit(plans, {p.item: _commitment(p) for p in plans})
    assert list(failures) == [0]
    assert str(failures[0]) == "commit in 'west': unavailable: down"
    assert failures[0].region == "west"
    assert ledgers["east"].calls[-1] == ("release", ["r0"])


async def test_a_plan_with_an_unregistered_owner_prepares_nothing(
    ledgers: dict[str, Ledger],
) -> None:
    coordinator = _coordinator(ledgers)
    plans = [_plan(0, ["east", "national", "south"]), _plan(1, ["east", "national"])]
    failures = await coordinator.prepare(plans)
    assert list(failures) == [0]
    assert str(failures[0]) == "region 'south' is not registered"
    assert failures[0].region == "south"
    assert ledgers["east"].calls == [("prepare", ["r1"])]


async def test_a_release_an_owner_could_not_take_is_made_again_later(
    ledgers: dict[str, Ledger],
) -> None:
    coordinator = _coordinator(ledgers)
    east = ledgers["east"]
    east.down = True
    await coordinator.release("east", ["r0", "r1"], "cancelled")
    await coordinator.release("south", ["r2"], "cancelled")
    east.down = False

    async def retried() -> bool:
        return len(east.calls) >= 2

    await retry_until(coordinator, retried)
    assert east.calls[0] == ("release", ["r0", "r1"])
    assert east.calls[1][0] == "release" and sorted(east.calls[1][1]) == ["r0", "r1"]
    await asyncio.sleep(0.05)
    assert len(east.calls) == 2


async def test_each_owner_is_asked_to_prepare_its_parts_with_their_flows(
    ledgers: dict[str, Ledger],
) -> None:
    coordinator = _coordinator(ledgers)
    east0, west0 = _flow("r0", "staging", "e1"), _flow("r0", "staging", "w1")
    east1 = _flow("r1", "delivery", "e2")
    plans = [
        _plan(0, ["east", "national", "west"], {"east": (east0,), "west": (west0,)}),
        _plan(1, ["east", "national"], {"east": (east1,)}),
    ]
    assert await coordinator.prepare(plans) == {}
    assert ledgers["east"].flows == [[east0, east1]]
    assert ledgers["west"].flows == [[west0]]
    assert ledgers["national"].flows == [[]]


async def test_a_release_that_keeps_the_deliveries_says_so_again_when_made_later(
    ledgers: dict[str, Ledger],
) -> None:
    coordinator = _coordinator(ledgers)
    east, west = ledgers["east"], ledgers["west"]
    assert await coordinator.release("west", ["r0"], "completed", keep_delivery=True)
    assert await coordinator.release("west", ["r1"], "cancelled")
    assert west.kept == [True, False]
    east.down = True
    await coordinator.release("east", ["r0"], "completed", keep_delivery=True)
    east.down = False

    async def retried() -> bool:
        return len(east.calls) >= 2

    await retry_until(coordinator, retried)
    assert east.calls == [("release", ["r0"]), ("release", ["r0"])]
    assert east.kept == [True, True]


async def test_what_each_step_did_with_the_parts_is_counted(ledgers: dict[str, Ledger]) -> None:
    counted: dict[tuple[str, str], int] = {}

    def count(step: str, outcome: str, parts: int) -> None:
        counted[(step, outcome)] = counted.get((step, outcome), 0) + parts

    participants: dict[str, Participant] = dict(ledgers)
    coordinator = Coordinator(participants.get, ttl_ms=1_000, count=count)
    ledgers["west"].refuse.add("r1")
    plans = [_plan(i, ["east", "national", "west"]) for i in range(2)]
    assert sorted(await coordinator.prepare(plans)) == [1]  # its three parts aborted
    ledgers["east"].down = True
    committing = [plans[0]]
    assert sorted(await coordinator.commit(committing, {0: _commitment(plans[0])})) == [0]
    assert await coordinator.prepare([_plan(2, ["north", "national"])])  # north: unregistered
    ledgers["east"].down = False
    assert await coordinator.release("west", ["r9"], "the request ended")

    assert counted == {
        ("prepare", "ok"): 5,
        ("prepare", "refused"): 1,
        ("prepare", "unavailable"): 1,  # north's part: the national one was never asked
        ("abort", "ok"): 3 + 2,
        ("abort", "unavailable"): 1,  # the east, down, owes it
        ("commit", "ok"): 2,
        ("commit", "unavailable"): 1,
        ("release", "ok"): 1,
    }
    assert coordinator.owed == 1
