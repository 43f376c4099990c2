"""The wire form of a reservation part: it carries the part's window, and a part without one
is refused."""

import pytest

from cnbrain.domain.bounds import MAX_EPOCH_S, MAX_WINDOW_S
from cnbrain.federation.codec import WireError, claim_of, part_message, part_window
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import Claim
from cnbrain.v1 import ledger_pb2


def _claim() -> Claim:
    return Claim(
        reservation_id="rsv-1",
        request_id="req-1",
        tenant_id="acme",
        site_id="NX-hub",
        cpu_m=4000,
        mem_mib=8192,
        storage_gib=10,
        accelerator_model="A100",
        accelerator_count=2,
        link_ids=("a--b", "b--c"),
        mbps=200,
        window=Window(1_800_000_000, 1_800_007_200),
        counts_quota=False,
    )


def test_a_part_crosses_the_wire_with_its_window() -> None:
    message = part_message(_claim())

    assert (message.start_s, message.end_s) == (1_800_000_000, 1_800_007_200)
    assert claim_of(ledger_pb2.PartClaim.FromString(message.SerializeToString())) == _claim()


@pytest.mark.parametrize(("start_s", "end_s"), [(0, 0), (1_800_000_000, 1_800_000_000), (5, 4)])
def test_a_part_without_a_window_is_refused_with_the_reason(start_s: int, end_s: int) -> None:
    message = part_message(_claim())
    message.start_s, message.end_s = start_s, end_s

    with pytest.raises(WireError, match=r"needs a window \[start_s, end_s\)"):
        part_window(message)
    with pytest.raises(WireError, match="needs a window"):
        claim_of(message)


@pytest.mark.parametrize(
    ("start_s", "end_s"),
    [(-1, 3600), (MAX_EPOCH_S, MAX_EPOCH_S + 1), (0, MAX_WINDOW_S + 1), (-(2**63), 2**63 - 1)],
)
def test_a_part_whose_window_is_out_of_bounds_is_refused(start_s: int, end_s: int) -> None:
    message = part_message(_claim())
    message.start_s, message.end_s = start_s, end_s
    with pytest.raises(WireError, match="must lie within"):
        part_window(message)
