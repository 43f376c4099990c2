"""`ScrapeReads`: the reads of a scrape are made once per `max_age_s`, once for the scrapes
that come while they are under way, each within `timeout_s`; a read that times out or
finds the database down makes the round say so and skips the reads after it, and a bug is
raised (the next scrape reads again)."""

import asyncio

import pytest

from cnbrain.federation.scrape_reads import Read, ScrapeReads


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class DownError(Exception):
    """What these tests' database raises when it does not answer."""


class Reads:
    """Reads that count how often each ran; `gate` holds them until set."""

    def __init__(self, count: int) -> None:
        self.ran = [0] * count
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: dict[int, BaseException] = {}

    def read(self, index: int) -> Read:
        async def one() -> None:
            self.ran[index] += 1
            await self.gate.wait()
            if index in self.fail:
                raise self.fail[index]

        return one


def _scrape_reads(reads: Reads, clock: Clock, *, max_age_s: float = 5.0) -> ScrapeReads:
    return ScrapeReads(
        [reads.read(i) for i in range(len(reads.ran))],
        max_age_s=max_age_s,
        timeout_s=0.05,
        is_outage=lambda exc: isinstance(exc, DownError),
        clock=clock,
    )


@pytest.mark.asyncio
async def test_scrapes_within_the_max_age_share_one_round_of_reads() -> None:
    reads, clock = Reads(2), Clock()
    shared = _scrape_reads(reads, clock)
    assert await shared.refresh() is True
    clock.now += 4.9
    assert await shared.refresh() is True
    assert reads.ran == [1, 1] and shared.rounds == 1
    clock.now += 0.1
    assert await shared.refresh() is True
    assert reads.ran == [2, 2] and shared.rounds == 2


@pytest.mark.asyncio
async def test_scrapes_during_a_round_wait_for_it_rather_than_read_again() -> None:
    reads, clock = Reads(1), Clock()
    shared = _scrape_reads(reads, clock, max_age_s=0)
    reads.gate.clear()
    scrapes = [asyncio.create_task(shared.refresh()) for _ in range(3)]
    for _ in range(10):  # every scrape under way, the round waiting at its gate
        await asyncio.sleep(0)
    assert reads.ran == [1]
    reads.gate.set()
    assert await asyncio.gather(*scrapes) == [True, True, True]
    assert reads.ran == [1] and shared.rounds == 1
    assert await shared.refresh() is True  # max age 0: the next scrape reads again
    assert reads.ran == [2]


@pytest.mark.asyncio
async def test_a_read_that_does_not_answer_in_time_is_the_database_down() -> None:
    reads, clock = Reads(2), Clock()
    shared = _scrape_reads(reads, clock)
    reads.gate.clear()  # never answers
    assert await shared.refresh() is False
    assert reads.ran == [1, 0]  # the reads after it are skipped
    assert await shared.refresh() is False  # within the max age: the same round
    assert reads.ran == [1, 0]
    reads.gate.set()
    clock.now += 5
    assert await shared.refresh() is True
    assert reads.ran == [2, 1]


@pytest.mark.asyncio
async def test_an_outage_says_down_and_a_bug_is_raised_and_read_again() -> None:
    reads, clock = Reads(2), Clock()
    shared = _scrape_reads(reads, clock)
    reads.fail[0] = DownError("no connection")
    assert await shared.refresh() is False
    assert reads.ran == [1, 0]
    reads.fail[0] = RuntimeError("a bug")
    clock.now += 5
    with pytest.raises(RuntimeError, match="a bug"):
        await shared.refresh()
    del reads.fail[0]
    assert await shared.refresh() is True  # a bug leaves no round behind: read again
    assert reads.ran == [3, 1]


def test_the_bounds_are_checked() -> None:
    with pytest.raises(ValueError):
        ScrapeReads([], max_age_s=-1, timeout_s=1, is_outage=lambda exc: False)
    with pytest.raises(ValueError):
        ScrapeReads([], max_age_s=1, timeout_s=0, is_outage=lambda exc: False)
