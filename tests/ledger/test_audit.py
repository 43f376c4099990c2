"""The ledger auditor's findings, given rows: what counts as wrong, what is repaired when."""

from cnbrain.ledger.audit import (
    Finding,
    HeldReservation,
    Kind,
    Part,
    Suspicions,
    Usage,
    holding_findings,
    report,
    usage_findings,
)

NOW = 10_000.0


def _part(
    id: str = "p1",
    *,
    state: str = "held",
    source: str | None = "east",
    created: float = NOW - 10,
    expires: float | None = None,
) -> Part:
    return Part(
        id=id,
        request_id=f"r-{id}",
        state=state,
        created_at_s=created,
        expires_at_s=expires,
        source=source,
    )


def test_a_consistent_usage_within_its_capacity_is_no_finding() -> None:
    assert (
        usage_findings([Usage("site 'a' cpu", 8, 8, 16), Usage("tenant 't' cpu", 5, 5, None)]) == []
    )


def test_used_that_is_not_the_sum_of_the_holdings_is_a_mismatch() -> None:
    (finding,) = usage_findings([Usage("link 'l' bandwidth", 100, 40, 1000)])
    assert (finding.kind, finding.object_id) == (Kind.USED_MISMATCH, "link 'l' bandwidth")
    assert "used 100" in finding.detail and "40" in finding.detail
    assert not finding.repairable


def test_negative_used_is_a_mismatch_even_when_the_holdings_agree() -> None:
    (finding,) = usage_findings([Usage("site 'a' cpu", -1, -1, 16)])
    assert finding.kind is Kind.USED_MISMATCH


def test_used_over_capacity_is_over_commit_and_only_reported() -> None:
    found = usage_findings([Usage("site 'a' H800", 9, 9, 8, external=0)])
    assert [f.kind for f in found] == [Kind.OVER_COMMIT]
    assert not found[0].repairable


def test_external_use_over_capacity_is_not_over_commit_of_the_brain() -> None:
    assert usage_findings([Usage("site 'a' cpu", 8, 8, 10, external=5)]) == []


def test_held_reservations_of_ended_and_of_waiting_requests() -> None:
    found = holding_findings(
        reservations=[
            HeldReservation("res-run", "r1", "running", NOW - 1),
            HeldReservation("res-done", "r2", "completed", NOW - 5),
            HeldReservation("res-queued", "r3", "queued", NOW - 5),
        ],
        parts=[],
        live={},
        now_s=NOW,
    )
    assert [(f.kind, f.object_id) for f in found] == [
        (Kind.ENDED_REQUEST, "res-done"),
        (Kind.NOT_RUNNABLE, "res-queued"),
    ]
    assert found[0].repairable and found[0].since_s == NOW - 5
    assert not found[1].repairable


def test_a_prepared_part_is_a_finding_once_past_its_expiry() -> None:
    found = holding_findings(
        reservations=[],
        parts=[
            _part("fresh", state="prepared", expires=NOW + 1),
            _part("lapsed", state="prepared", expires=NOW - 2),
        ],
        live={},
        now_s=NOW,
    )
    assert [(f.kind, f.object_id, f.since_s) for f in found] == [
        (Kind.EXPIRED_PREPARED, "lapsed", NOW - 2)
    ]


def test_held_parts_by_what_their_source_answered() -> None:
    parts = [
        _part("live"),
        _part("gone"),
        _part("unasked", source="west"),
        _part("no-request", source=None),
    ]
    found = holding_findings(
        reservations=[],
        parts=parts,
        live={"r-live": True, "r-gone": False, "r-unasked": None, "r-no-request": False},
        now_s=NOW,
    )
    assert [(f.kind, f.object_id) for f in found] == [
        (Kind.NOT_LIVE_AT_SOURCE, "gone"),
        (Kind.UNVERIFIED, "unasked"),
        (Kind.UNVERIFIED, "no-request"),
    ]
    assert "could not be asked" in found[1].detail
    assert "no request" in found[2].detail
    assert [f.repairable for f in found] == [True, False, False]


def test_a_released_part_is_no_finding() -> None:
    found = holding_findings(
        reservations=[], parts=[_part(state="released")], live={"r-p1": False}, now_s=NOW
    )
    assert found == []


def test_a_new_finding_is_repaired_only_once_found_again_the_grace_later() -> None:
    suspicions = Suspicions()
    (finding,) = holding_findings(
        reservations=[], parts=[_part(created=NOW)], live={"r-p1": False}, now_s=NOW
    )
    assert suspicions.lasting([finding], now_s=NOW, grace_s=5) == []
    suspicions.update([finding], NOW)
    assert suspicions.lasting([finding], now_s=NOW + 4.9, grace_s=5) == []
    suspicions.update([finding], NOW + 4.9)
    assert suspicions.lasting([finding], now_s=NOW + 5, grace_s=5) == [finding]


def test_a_finding_that_went_away_starts_its_grace_again() -> None:
    suspicions = Suspicions()
    finding = Finding(Kind.NOT_LIVE_AT_SOURCE, "p1", "not live")
    suspicions.update([finding], NOW)
    suspicions.update([], NOW + 3)
    suspicions.update([finding], NOW + 4)
    assert suspicions.lasting([finding], now_s=NOW + 6, grace_s=5) == []
    assert suspicions.lasting([finding], now_s=NOW + 9, grace_s=5) == [finding]


def test_a_part_older_than_the_grace_is_repaired_at_its_first_finding() -> None:
    (finding,) = holding_findings(
        reservations=[], parts=[_part(created=NOW - 6)], live={"r-p1": False}, now_s=NOW
    )
    assert Suspicions().lasting([finding], now_s=NOW, grace_s=5) == [finding]


def test_what_is_only_reported_is_never_due_however_long_it_lasts() -> None:
    suspicions = Suspicions()
    found = [
        *usage_findings([Usage("site 'a' cpu", 9, 8, 8)]),
        *holding_findings(
            reservations=[HeldReservation("res", "r", "queued", 0.0)],
            parts=[_part(created=0.0, source="west")],
            live={},
            now_s=NOW,
        ),
    ]
    assert {f.kind for f in found} == {
        Kind.USED_MISMATCH,
        Kind.OVER_COMMIT,
        Kind.NOT_RUNNABLE,
        Kind.UNVERIFIED,
    }
    suspicions.update(found, 0.0)
    assert suspicions.lasting(found, now_s=NOW, grace_s=1) == []


def test_a_report_counts_per_kind_and_lists_at_most_its_limit() -> None:
    found = usage_findings([Usage(f"site {i} cpu", 1, 0, 8) for i in range(5)])
    audit = report(NOW, found, found[:2], listed=3)
    assert audit.found == {"used_mismatch": 5}
    assert audit.repaired == {"used_mismatch": 2}
    assert len(audit.findings) == 3 and len(audit.repairs) == 2
