"""Node pools on the wire: a part's node count, and a candidate site's pool summaries, read
back as sent, and refused (a part) or read as all free (a summary) when they do not fit."""

import dataclasses

import pytest

from cnbrain.federation.codec import (
    WireError,
    claim_of,
    part_message,
    pool_summaries,
    pools_message,
)
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import Claim
from cnbrain.ledger.nodes import Pool, PoolSummary

POOLS = (Pool("a100", 4, 128_000, 1_048_576, "A100", 8), Pool("cpu", 2, 64_000, 262_144, None, 0))


def gang(nodes: int) -> Claim:
    return Claim(
        reservation_id="rsv-1",
        request_id="req-1",
        tenant_id="acme",
        site_id="BJ-dc-1",
        cpu_m=nodes * 8000,
        mem_mib=nodes * 16384,
        storage_gib=0,
        accelerator_model="A100",
        accelerator_milli=nodes * 8000,
        link_ids=(),
        mbps=0,
        window=Window(1_000, 4_600),
        nodes=nodes,
    )


def test_a_parts_nodes_travel_with_it_and_a_bad_count_is_refused() -> None:
    assert claim_of(part_message(gang(4))) == gang(4)
    message = part_message(gang(1))
    message.ClearField("nodes")  # a brain that never sends it: one node
    assert claim_of(message).nodes == 1
    for nodes in (3, 100_001, -1):
        bad = part_message(gang(4))
        bad.nodes = nodes
        with pytest.raises(WireError, match="nodes"):
            claim_of(bad)
    fraction = dataclasses.replace(gang(1), accelerator_milli=250)
    assert claim_of(part_message(fraction)) == fraction
    for nodes, milli in ((1, 1500), (2, 500), (2, 3000)):
        bad = part_message(dataclasses.replace(gang(nodes), accelerator_milli=milli))
        with pytest.raises(WireError, match="nodes"):
            claim_of(bad)


def test_pool_summaries_round_trip_and_a_mismatch_reads_as_none() -> None:
    sent = (
        PoolSummary((1, 0, 0, 0, 0, 0, 0, 0, 3), ((250, 2), (900, 1)), ((0, 100, 1), (8, 0, 1))),
        PoolSummary(tuple([0] * 64 + [2])),
    )
    assert pool_summaries(pools_message(sent), POOLS) == sent
    assert pool_summaries(pools_message(sent[:1]), POOLS) is None
    for wrong in (
        PoolSummary((1, 0, 0, 0, 0, 0, 0, 0, 4)),  # 5 nodes in a pool of 4
        PoolSummary((4,)),  # not one entry per number of free accelerators
        PoolSummary((0,) * 8 + (4,), ((1000, 1),)),  # a whole accelerator is not shared
        PoolSummary((0,) * 8 + (4,), (), ((9, 0, 1),)),  # a node has 8 accelerators
        PoolSummary((0,) * 8 + (4,), (), ((0, 1000, 1),)),  # a whole one is no fraction
        PoolSummary((0,) * 8 + (4,), (), ((1, 500, 1),)),  # whole and a fraction at once
        PoolSummary((0,) * 8 + (4,), (), ((1, 0, 0),)),  # no take
        PoolSummary((0,) * 8 + (4,), (), ((1, 0, 32_001),)),  # more than 1000 per accelerator
        PoolSummary((0,) * 8 + (4,), (), ((1, 0, 1), (1, 0, 2))),  # a shape twice
    ):
        assert pool_summaries(pools_message((wrong, sent[1])), POOLS) is None
    cpu_holding = PoolSummary(tuple([0] * 64 + [2]), (), ((0, 0, 1),))  # a CPU pool holds none
    assert pool_summaries(pools_message((sent[0], cpu_holding)), POOLS) is None
    uneven = pools_message(sent)
    uneven[0].held_count.append(1)  # a count with no shape
    assert pool_summaries(uneven, POOLS) is None
