"""The two-phase-commit coordinator of cross-region reservations: prepare every part of a
batch of plans in its owner, commit them, release every part of a plan that one owner
refused or could not commit, and release again, later, what an owner could not release when
asked.

With a `Journal`, every placement is recorded as under way before any of its parts is
prepared, and its record is deleted once its outcome is decided (every part committed, or
released or owed a release), before the answer goes out; `recover` releases, in every owner,
the parts of the placements that a national brain (or a replica of it) that stopped left
under way: none of them was answered.

Each step is one call per owner carrying all its parts of the batch, the owners in parallel.
An owner is reached through its `Participant` (the port, below; `national.participants`
has its implementations), looked up once per step. A participant's every call carries many
parts, one result per part, in the order given."""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cnbrain.federation.errors import PeerUnavailable
from cnbrain.ledger.claim import Claim, FlowHold
from cnbrain.national.planner import AttemptError, Part, Plan, reason_of
from cnbrain.telemetry.spans import span

log = logging.getLogger("cnbrain.national")


@dataclass(frozen=True, slots=True)
class Commitment:
    """What an owner stores with a committed part: the decision and the request, as
    documents (for a ledger in this process) and as JSON (for the wire)."""

    reservation_id: str
    decision: dict[str, Any]
    decision_json: str
    request: dict[str, Any]
    request_json: str


class Participant(Protocol):
    """One owner's ledger in the two-phase commit of cross-region reservations."""

    @property
    def region(self) -> str | None:
        """The region left out of the next attempt when this ledger fails a part; None for
        the national brain's own."""

    async def prepare(
        self, claims: Sequence[Claim], *, ttl_ms: int, flows: Sequence[FlowHold] = ()
    ) -> list[str | None]:
        """Prepare every claim with its flows (those of `flows` of its reservation id, each
        over its own window), each expiring after `ttl_ms` unless committed; for each, None
        (prepared) or why not (a claim whose flows do not fit is refused). Raises
        PeerUnavailable when the owner does not answer."""

    async def commit(self, commitments: Sequence[Commitment]) -> list[str | None]:
        """Commit the prepared part of every commitment; for each, None (held) or why not.
        Raises PeerUnavailable when the owner does not answer."""

    async def release(
        self, reservation_ids: Sequence[str], reason: str, *, keep_delivery: bool = False
    ) -> None:
        """Release every reservation's part, prepared or committed (none held: nothing), its
        flows included but, with `keep_delivery` (the job completed: its results still
        move), its delivery flows, which stay held until their windows end. Raises
        PeerUnavailable when the owner does not answer (nothing known released)."""


class Backlog(Protocol):
    """Where the releases an owner could not make are kept, so that a restart of the
    national brain does not forget them (`national.release_backlog`)."""

    async def owe(
        self,
        owner: str,
        reservation_ids: Sequence[str],
        reason: str,
        *,
        keep_delivery: bool = False,
    ) -> None:
        """Record that `owner` still has to release `reservation_ids`, for `reason` (with
        `keep_delivery`, but their delivery flows)."""

    async def paid(self, owner: str, reservation_ids: Sequence[str]) -> None:
        """Forget those releases: `owner` has made them."""

    async def owed(self) -> list[tuple[str, str, str, bool]]:
        """Every release still owed, as (owner, reservation id, reason, keep_delivery)."""


@dataclass(frozen=True, slots=True)
class InFlight:
    """A placement under way: reservation `reservation_id` of request `request_id`, with
    parts in `owners`."""

    reservation_id: str
    request_id: str
    owners: tuple[str, ...]


class Journal(Protocol):
    """Where the placements under way are recorded, so that the parts of those a national
    brain (or replica) that stopped never decided are released (`national.inflight`)."""

    async def begin(self, placements: Sequence[InFlight]) -> None:
        """Record `placements` as under way."""

    async def end(self, reservation_ids: Sequence[str]) -> None:
        """Forget those placements: their outcome is decided."""

    async def orphaned(self) -> list[InFlight]:
        """The placements recorded as under way that no live national brain decides."""


RECOVERED = "the national brain stopped before the placement was decided"
"""The reason of the releases `recover` makes."""

Lookup = Callable[[str], Participant | None]
"""The participant of an owner; None: an owner (region) that is not registered."""

Count = Callable[[str, str, int], None]
"""Told, after each call to an owner, how many parts a step (`prepare`, `commit`, `abort`:
the release of a placement that failed or was left undecided, `release`: of one that ended)
did with which outcome (`ok`; `refused`, with a reason; `unavailable`: the owner did not
answer, or is not registered)."""

ByOwner = dict[str, list[tuple[int, Part]]]


class Coordinator:
    """Two-phase commit of plans' parts in their owners, each reached through the
    participant `participant` looks up. The releases owners could not make are kept in
    `backlog` too (None: in memory only) and taken up from there by
    `retry_releases_forever`; the placements under way are recorded in `journal` (None: not
    recorded, and `recover` has nothing to do). `count` is told what each step did with the
    parts (None: nobody is)."""

    def __init__(
        self,
        participant: Lookup,
        *,
        ttl_ms: int,
        backlog: Backlog | None = None,
        journal: Journal | None = None,
        count: Count | None = None,
    ) -> None:
        self._participant = participant
        self._ttl_ms = ttl_ms
        self._backlog = backlog
        self._journal = journal
        self._count = count
        self._unreleased: set[tuple[str, str, str, bool]] = set()
        """(owner, reservation id, reason, keep_delivery) of the releases owed."""

    @property
    def owed(self) -> int:
        """How many releases this brain owes owners now (see `release`)."""
        return len(self._unreleased)

    async def recover(self) -> int:
        """Release every part of the placements the journal finds orphaned (a national brain
        that stopped left them; none was answered), one call per owner; what an owner cannot
        release now is owed (`release`). Then forget them; how many there were."""
        if self._journal is None:
            return 0
        left = await self._journal.orphaned()
        if not left:
            return 0
        by_owner: dict[str, list[str]] = {}
        for placement in left:
            for owner in placement.owners:
                by_owner.setdefault(owner, []).append(placement.reservation_id)
        await asyncio.gather(
            *(self._release(owner, ids, RECOVERED, step="abort") for owner, ids in by_owner.items())
        )
        await self._journal.end([placement.reservation_id for placement in left])
        return len(left)

    async def prepare(self, plans: Sequence[Plan]) -> dict[int, AttemptError]:
        """Prepare every part of `plans`, one call per owner; for each plan with a part in an
        owner that is not registered (nothing prepared) or that was refused (all its parts
        then released), the AttemptError, by item."""
        failures: dict[int, AttemptError] = {}
        for plan in plans:
            unknown = [p.owner for p in plan.parts if self._participant(p.owner) is None]
            if unknown:
                failures[plan.item] = AttemptError(
                    f"region {unknown[0]!r} is not registered", region=unknown[0]
                )
                # The parts of the owners that are not registered; the others' owners were
                # never asked.
                self._counted("prepare", "unavailable", len(unknown))
        ttl_ms = self._ttl_ms
        preparing = [plan for plan in plans if plan.item not in failures]
        if self._journal is not None and preparing:
            try:
                await self._journal.begin([_in_flight(plan) for plan in preparing])
            except Exception as error:
                log.warning("could not record placements under way", exc_info=True)
                unrecorded = AttemptError(
                    f"the placement could not be recorded: {reason_of(error)}"
                )
                failures.update((plan.item, unrecorded) for plan in preparing)
                return failures
        refused = await self._step(
            "prepare",
            preparing,
            lambda participant, parts: participant.prepare(
                [part.claim for _, part in parts],
                ttl_ms=ttl_ms,
                flows=[flow for _, part in parts for flow in part.flows],
            ),
            "a part could not be prepared",
        )
        failures.update(refused)
        await self._decided([plan for plan in preparing if plan.item in refused])
        return failures

    async def commit(
        self, plans: Sequence[Plan], commitments: Mapping[int, Commitment]
    ) -> dict[int, AttemptError]:
        """Commit every part of `plans` with its plan's commitment (by item), one call per
        owner, in parallel (a part committed in one owner and not in another is released in
        both, so the order does not matter); for each plan with a part that could not be
        committed (all its parts then released), the AttemptError, by item."""
        failures = await self._step(
            "commit",
            plans,
            lambda participant, parts: participant.commit([commitments[i] for i, _ in parts]),
            "a part could not be committed",
        )
        if not await self._decided(plans):
            committed = [plan for plan in plans if plan.item not in failures]
            await self._release_plans(committed, "the outcome could not be recorded")
            unrecorded = AttemptError("the outcome of the placement could not be recorded")
            failures.update((plan.item, unrecorded) for plan in committed)
        return failures

    async def _decided(self, plans: Sequence[Plan]) -> bool:
        """Forget that `plans` are under way (their outcome is decided); False when the
        journal could not be written (their records stay: a restart releases them)."""
        if self._journal is None or not plans:
            return True
        try:
            await self._journal.end([plan.reservation.id for plan in plans])
        except Exception:
            log.warning("could not record the outcome of placements", exc_info=True)
            return False
        return True

    async def release(
        self,
        owner: str,
        reservation_ids: Sequence[str],
        reason: str,
        *,
        keep_delivery: bool = False,
    ) -> bool:
        """Release `reservation_ids` in `owner` (one call), with `keep_delivery` (the job
        completed: each part's delivery flows stay held until their windows end,
        `Participant.release`); whether it did. Parts that cannot be released now are owed
        (in the backlog) and released by `retry_releases_forever` once their owner answers
        (a prepared one also expires there by itself), with their `keep_delivery`."""
        return await self._release(
            owner, reservation_ids, reason, keep_delivery=keep_delivery, step="release"
        )

    async def _release(
        self,
        owner: str,
        reservation_ids: Sequence[str],
        reason: str,
        *,
        keep_delivery: bool = False,
        step: str,
    ) -> bool:
        """`release`, counted as `step`."""
        if not reservation_ids:
            return True
        participant = self._participant(owner)
        try:
            if participant is None:
                raise LookupError(f"region {owner!r} is not registered")
            await participant.release(reservation_ids, reason, keep_delivery=keep_delivery)
        except (PeerUnavailable, LookupError) as error:
            self._counted(step, "unavailable", len(reservation_ids))
            log.warning(
                "release of %s in %s failed (%s); will retry",
                ", ".join(reservation_ids),
                owner,
                error,
            )
            self._unreleased.update((owner, rid, reason, keep_delivery) for rid in reservation_ids)
            if self._backlog is not None:
                try:
                    await self._backlog.owe(
                        owner, reservation_ids, reason, keep_delivery=keep_delivery
                    )
                except Exception:
                    log.warning("could not keep the releases owed in the backlog", exc_info=True)
            return False
        self._counted(step, "ok", len(reservation_ids))
        return True

    async def retry_releases_forever(self, interval_s: float = 2.0) -> None:
        """Release again, every `interval_s`, the parts an owner could not release when
        asked (it was down or unreachable), until each is released: those this brain owes,
        and those the backlog holds (of a run before, or of another replica), read again
        every time, each with its `keep_delivery`. Until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            if self._backlog is not None:
                try:
                    self._unreleased.update(await self._backlog.owed())
                except Exception:
                    log.warning("could not read the releases owed", exc_info=True)
            waiting: dict[tuple[str, str, bool], list[str]] = {}
            for entry in list(self._unreleased):
                self._unreleased.discard(entry)
                owner, reservation_id, reason, keep = entry
                waiting.setdefault((owner, reason, keep), []).append(reservation_id)
            for (owner, reason, keep), reservation_ids in waiting.items():
                released = await self.release(owner, reservation_ids, reason, keep_delivery=keep)
                if released and self._backlog:
                    try:
                        await self._backlog.paid(owner, reservation_ids)
                    except Exception:
                        log.warning("could not clear paid releases", exc_info=True)

    async def _release_plans(self, plans: Sequence[Plan], reason: str) -> None:
        """Release every part of `plans`, one call per owner."""
        by_owner = _by_owner(plans)
        await asyncio.gather(
            *(
                self._release(
                    owner, [p.claim.reservation_id for _, p in parts], reason, step="abort"
                )
                for owner, parts in by_owner.items()
            )
        )

    async def _step(
        self,
        step: str,
        plans: Sequence[Plan],
        call: Callable[[Participant, list[tuple[int, Part]]], Awaitable[list[str | None]]],
        reason: str,
    ) -> dict[int, AttemptError]:
        """`call` each owner's participant with its parts of `plans`, the owners in
        parallel; for each plan with a part that failed (all its parts then released for
        `reason`), the AttemptError, by item. Traced as the span `two_phase.<step>`."""
        by_owner = _by_owner(plans)
        participants = {owner: self._participant(owner) for owner in by_owner}
        with span(
            f"two_phase.{step}", {"cnbrain.plans": len(plans), "cnbrain.owners": len(by_owner)}
        ):
            replies = await asyncio.gather(
                *(
                    _unregistered(owner)
                    if participant is None
                    else call(participant, by_owner[owner])
                    for owner, participant in participants.items()
                ),
                return_exceptions=True,
            )
            if self._count is not None:
                for outcome, parts in _outcomes(by_owner, replies).items():
                    self._count(step, outcome, parts)
            failures = _failures(step, by_owner, participants, replies)
            await self._release_plans([plan for plan in plans if plan.item in failures], reason)
        return failures

    def _counted(self, step: str, outcome: str, parts: int) -> None:
        if self._count is not None and parts:
            self._count(step, outcome, parts)


def _in_flight(plan: Plan) -> InFlight:
    owners = tuple(dict.fromkeys(part.owner for part in plan.parts))
    return InFlight(plan.reservation.id, plan.reservation.request_id, owners)


async def _unregistered(owner: str) -> list[str | None]:
    raise LookupError(f"region {owner!r} is not registered")


def _by_owner(plans: Sequence[Plan]) -> ByOwner:
    """The parts of `plans` by owner, each with its plan's item, in plan order."""
    owners: ByOwner = {}
    for plan in plans:
        for part in plan.parts:
            owners.setdefault(part.owner, []).append((plan.item, part))
    return owners


def _outcomes(by_owner: ByOwner, replies: Sequence[object]) -> dict[str, int]:
    """How many parts of a step's calls ended with which outcome (`Count`); `replies` holds
    each owner's call result, in `by_owner` order."""
    outcomes: dict[str, int] = {}
    for parts, reply in zip(by_owner.values(), replies, strict=True):
        if isinstance(reply, BaseException):
            outcomes["unavailable"] = outcomes.get("unavailable", 0) + len(parts)
            continue
        assert isinstance(reply, list)
        refused = sum(1 for reason in reply if reason is not None)
        outcomes["refused"] = outcomes.get("refused", 0) + refused
        outcomes["ok"] = outcomes.get("ok", 0) + len(reply) - refused
    return {outcome: parts for outcome, parts in outcomes.items() if parts}


def _failures(
    step: str,
    by_owner: ByOwner,
    participants: Mapping[str, Participant | None],
    replies: Sequence[object],
) -> dict[int, AttemptError]:
    """The AttemptError of each item with a part that `step` failed in its owner, by item
    (the first such part's); `replies` holds each owner's call result, in `by_owner` order."""
    failures: dict[int, AttemptError] = {}
    for (owner, parts), reply in zip(by_owner.items(), replies, strict=True):
        participant = participants[owner]
        region = owner if participant is None else participant.region
        for position, (item, _) in enumerate(parts):
            reason = _reason_at(reply, position, len(parts))
            if reason is not None and item not in failures:
                failures[item] = AttemptError(f"{step} in {owner!r}: {reason}", region=region)
    return failures


def _reason_at(reply: object, position: int, count: int) -> str | None:
    """Why the part at `position` of a call failed: the call's exception, or its result."""
    if isinstance(reply, BaseException):
        return reason_of(reply)
    assert isinstance(reply, list) and len(reply) == count
    reason = reply[position]
    assert reason is None or isinstance(reason, str)
    return reason
