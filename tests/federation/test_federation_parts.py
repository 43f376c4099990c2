"""The wire form of a reservation part: it carries the part's window and its flows, and a
part without a window, or with a malformed flow, is refused naming what is wrong."""

import pytest

from cnbrain.domain.bounds import MAX_EPOCH_S, MAX_WINDOW_S
from cnbrain.federation.codec import (
    MAX_FLOW_LINKS,
    MAX_PART_FLOWS,
    WireError,
    claim_of,
    part_flows,
    part_message,
    part_window,
)
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import MAX_FLOW_MBPS, Claim, FlowHold
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
        accelerator_milli=2000,
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


def _flows() -> list[FlowHold]:
    return [
        FlowHold("rsv-1", "staging", "SH", ("a--b",), 300, Window(1_799_990_000, 1_800_000_000)),
        FlowHold("rsv-1", "delivery", "NX-hub", ("b--c", "a--b"), 50, Window(1, 2)),
    ]


def test_a_part_crosses_the_wire_with_its_flows() -> None:
    message = part_message(_claim(), _flows())

    read = ledger_pb2.PartClaim.FromString(message.SerializeToString())
    assert part_flows(read) == tuple(_flows())
    assert part_flows(part_message(_claim())) == ()


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("kind", "upload", "flows[1].kind"),
        ("peer", "x" * 129, "flows[1].peer"),
        ("mbps", 0, "flows[1].mbps"),
        ("mbps", -5, "flows[1].mbps"),
        ("mbps", MAX_FLOW_MBPS + 1, "flows[1].mbps"),
        ("start_s", 2, "flows[1]: a flow needs a window"),
        ("end_s", MAX_EPOCH_S + 1, "flows[1]: a flow's window"),
        ("start_s", -1, "flows[1]: a flow's window"),
    ],
)
def test_a_malformed_flow_is_refused_naming_its_field(
    field: str, value: object, named: str
) -> None:
    message = part_message(_claim(), _flows())
    setattr(message.flows[1], field, value)

    with pytest.raises(WireError) as refused:
        part_flows(message)
    assert str(refused.value).startswith(named)


@pytest.mark.parametrize(
    "links", [[], ["a--b", "a--b"], [f"l{i}" for i in range(MAX_FLOW_LINKS + 1)]]
)
def test_a_flow_without_links_with_one_twice_or_with_too_many_is_refused(
    links: list[str],
) -> None:
    message = part_message(_claim(), _flows())
    del message.flows[0].link_ids[:]
    message.flows[0].link_ids.extend(links)

    with pytest.raises(WireError, match=r"^flows\[0\]\.link_ids"):
        part_flows(message)


def test_a_part_with_too_many_flows_is_refused() -> None:
    flow = _flows()[0]
    assert len(part_flows(part_message(_claim(), [flow] * MAX_PART_FLOWS))) == MAX_PART_FLOWS

    with pytest.raises(WireError, match=rf"^flows: a part carries at most {MAX_PART_FLOWS}"):
        part_flows(part_message(_claim(), [flow] * (MAX_PART_FLOWS + 1)))
