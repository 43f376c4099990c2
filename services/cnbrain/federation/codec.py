"""Wire forms of paths and reservation parts (cnbrain.v1 messages) and back."""

import json
from collections.abc import Mapping, Sequence

import numpy as np

from cnbrain.domain.accelerators import MILLI
from cnbrain.domain.bounds import MAX_EPOCH_S, MAX_NAME_LENGTH, MAX_NODES, MAX_WINDOW_S
from cnbrain.domain.errors import Invalid
from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import FLOW_KINDS, MAX_FLOW_MBPS, Claim, FlowHold
from cnbrain.ledger.fragments import Held
from cnbrain.ledger.nodes import Pool, PoolSummary, describes
from cnbrain.netmap.arrays import IntArray, MapArrays
from cnbrain.placement.request_check import parse_request
from cnbrain.routing.paths import GraphPath
from cnbrain.v1 import common_pb2, ledger_pb2, regional_pb2

MAX_PART_FLOWS = 64
"""The flows one part of a Prepare may carry."""

MAX_FLOW_LINKS = 256
"""The links one flow of a part may cross."""


class WireError(Invalid):
    """A message from a peer names something this brain's map does not have."""


def path_message(path: GraphPath, *, arrays: MapArrays, residual_mbps: IntArray) -> common_pb2.Path:
    links = arrays.map.links
    return common_pb2.Path(
        nodes=list(path.nodes),
        link_ids=[links[j].id for j in path.links],
        free_mbps=[int(residual_mbps[j]) for j in path.links],
        latency_ms=path.latency_ms,
    )


def graph_path(
    message: common_pb2.Path, *, arrays: MapArrays, links: Mapping[str, int]
) -> GraphPath:
    """The path a peer sent, checked against this brain's map; its latency is recomputed from
    the map. Raises WireError naming an unknown link or a malformed path."""
    if len(message.nodes) != len(message.link_ids) + 1:
        raise WireError(f"a path has {len(message.nodes)} nodes and {len(message.link_ids)} links")
    if len(message.free_mbps) != len(message.link_ids):
        raise WireError("a path gives free bandwidth for some of its links only")
    indices: list[int] = []
    for position, link_id in enumerate(message.link_ids):
        j = links.get(link_id)
        if j is None:
            raise WireError(f"unknown link {link_id!r}")
        link = arrays.map.links[j]
        ends = {message.nodes[position], message.nodes[position + 1]}
        if ends != {link.a, link.b}:
            raise WireError(f"link {link_id!r} does not join {sorted(ends)}")
        indices.append(j)
    array = np.asarray(indices, dtype=np.int64)
    return GraphPath(
        nodes=tuple(message.nodes),
        links=tuple(indices),
        link_array=array,
        latency_ms=float(arrays.link_latency_ms[array].sum()) if indices else 0.0,
    )


class PathReader:
    """Paths as peers sent them, checked against this brain's map (`graph_path`) and against
    their owner; a path met again (the same region, nodes and links: many requests of a batch
    share their candidates' paths) is checked once."""

    def __init__(self, arrays: MapArrays) -> None:
        self._arrays = arrays
        self._links = arrays.link_index
        self._read: dict[tuple[str, tuple[str, ...], tuple[str, ...]], GraphPath] = {}

    def read(self, message: common_pb2.Path, *, owner: str) -> GraphPath:
        """The path of `message`; WireError when it is malformed, names an unknown link, or
        uses a link that `owner` does not own."""
        key = (owner, tuple(message.nodes), tuple(message.link_ids))
        known = self._read.get(key)
        if known is not None:
            if len(message.free_mbps) != len(message.link_ids):
                raise WireError("a path gives free bandwidth for some of its links only")
            return known
        path = graph_path(message, arrays=self._arrays, links=self._links)
        map_links = self._arrays.map.links
        for link_id, j in zip(message.link_ids, path.links, strict=True):
            if map_links[j].owner != owner:
                raise WireError(f"link {link_id!r} is not owned by {owner!r}")
        self._read[key] = path
        return path


def request_json(request: PlacementRequest) -> str:
    return request.model_dump_json()


def request_of(text: str) -> PlacementRequest:
    """The request in a message; raises RequestError (a ValueError) naming a bad field."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WireError(f"the request is not JSON: {exc}") from None
    return parse_request(raw)


def pools_message(summaries: Sequence[PoolSummary]) -> list[regional_pb2.PoolFree]:
    """The wire form of a site's pool summaries."""
    return [
        regional_pb2.PoolFree(
            nodes_by_free=list(s.nodes_by_free),
            shared_free_milli=[free for free, _ in s.shared_by_free],
            shared_count=[count for _, count in s.shared_by_free],
            held_devices=[devices for devices, _, _ in s.held],
            held_milli=[milli for _, milli, _ in s.held],
            held_count=[count for _, _, count in s.held],
        )
        for s in summaries
    ]


def pool_summaries(
    messages: Sequence[regional_pb2.PoolFree], pools: Sequence[Pool]
) -> tuple[PoolSummary, ...] | None:
    """The summaries a region sent for a site whose map pools are `pools`; None when they do
    not match them (another count of pools, another number of units or nodes, a fraction or
    a held shape out of bounds), so that the caller takes the pools as all free."""
    if len(messages) != len(pools):
        return None
    summaries = []
    for message, pool in zip(messages, pools, strict=True):
        nodes = tuple(message.nodes_by_free)
        shared = tuple(zip(message.shared_free_milli, message.shared_count, strict=False))
        if (
            len(message.shared_free_milli) != len(message.shared_count)
            or not describes(pool, nodes, shared)
            or (held := _held_of(message, pool)) is None
        ):
            return None
        summaries.append(PoolSummary(nodes, tuple(sorted(shared)), held))
    return tuple(summaries)


def _held_of(message: regional_pb2.PoolFree, pool: Pool) -> Held | None:
    """The held shapes of `message`, by shape; None when they could not be held on `pool`.
    They can when each is there once, a number of a node's accelerators or a fraction of
    one, with 1 to a thousand node takes per accelerator of the pool; a CPU pool holds
    none."""
    if not (len(message.held_devices) == len(message.held_milli) == len(message.held_count)):
        return None
    held = tuple(
        sorted(zip(message.held_devices, message.held_milli, message.held_count, strict=True))
    )
    if pool.model is None:
        return held if not held else None
    if len({(devices, milli) for devices, milli, _ in held}) != len(held):
        return None
    most = pool.count * pool.devices * MILLI
    fits = all(
        1 <= count <= most
        and ((milli == 0 and 0 <= devices <= pool.devices) or (devices == 0 and 0 < milli < MILLI))
        for devices, milli, count in held
    )
    return held if fits else None


def part_message(claim: Claim, flows: Sequence[FlowHold] = ()) -> ledger_pb2.PartClaim:
    """The wire form of one part, with its `flows`, for a Prepare."""
    return ledger_pb2.PartClaim(
        reservation_id=claim.reservation_id,
        request_id=claim.request_id,
        tenant_id=claim.tenant_id,
        compute=common_pb2.Compute(
            site_id=claim.site_id or "",
            cpu_m=claim.cpu_m,
            mem_mib=claim.mem_mib,
            storage_gib=claim.storage_gib,
            accelerator_model=claim.accelerator_model or "",
            accelerator_milli=claim.accelerator_milli,
        ),
        link_ids=list(claim.link_ids),
        mbps=claim.mbps,
        count_quota=claim.counts_quota,
        start_s=claim.window.start,
        end_s=claim.window.end,
        nodes=claim.nodes,
        flows=[
            ledger_pb2.PartFlow(
                kind=flow.kind,
                peer=flow.peer,
                link_ids=list(flow.link_ids),
                mbps=flow.mbps,
                start_s=flow.window.start,
                end_s=flow.window.end,
            )
            for flow in flows
        ],
    )


def part_window(message: ledger_pb2.PartClaim) -> Window:
    """The window of one part of a Prepare; raises WireError when it has none (a sender
    that predates windows), a malformed one, or one out of bounds: before epoch second 0,
    past `MAX_EPOCH_S`, or longer than `MAX_WINDOW_S`."""
    return _window(message.start_s, message.end_s, "a part")


def _window(start: int, end: int, what: str, field: str | None = None) -> Window:
    """The window [start, end) of `what` (named so in errors), checked as `part_window`
    checks a part's."""
    if start >= end:
        raise WireError(
            f"{what} needs a window [start_s, end_s) with start_s < end_s, not [{start}, {end})",
            field=field,
        )
    if start < 0 or end > MAX_EPOCH_S or end - start > MAX_WINDOW_S:
        raise WireError(
            f"{what}'s window [{start}, {end}) must lie within [0, {MAX_EPOCH_S}] and last at"
            f" most {MAX_WINDOW_S} s",
            field=field,
        )
    return Window(start, end)


def part_flows(message: ledger_pb2.PartClaim) -> tuple[FlowHold, ...]:
    """The flows of one part of a Prepare, each of the part's reservation. Raises WireError
    naming the field at fault (`flows`, or `flows[i]` and its own field): more than
    `MAX_PART_FLOWS` flows; a kind not in `claim.FLOW_KINDS`; a peer longer than
    `MAX_NAME_LENGTH`; no links, more than `MAX_FLOW_LINKS`, or one twice; mbps not within
    1..`claim.MAX_FLOW_MBPS`; a window as `part_window` refuses a part's. Which
    links this brain owns is not checked here."""
    if len(message.flows) > MAX_PART_FLOWS:
        raise WireError(
            f"a part carries at most {MAX_PART_FLOWS} flows, not {len(message.flows)}",
            field="flows",
        )
    flows = []
    for i, flow in enumerate(message.flows):
        where = f"flows[{i}]"
        if flow.kind not in FLOW_KINDS:
            kinds = ", ".join(sorted(FLOW_KINDS))
            raise WireError(f"unknown kind {flow.kind!r} (not {kinds})", field=f"{where}.kind")
        if len(flow.peer) > MAX_NAME_LENGTH:
            raise WireError(
                f"at most {MAX_NAME_LENGTH} characters, not {len(flow.peer)}",
                field=f"{where}.peer",
            )
        links = tuple(flow.link_ids)
        if not 0 < len(links) <= MAX_FLOW_LINKS or len(set(links)) != len(links):
            raise WireError(
                f"1 to {MAX_FLOW_LINKS} distinct links, not {len(links)}"
                f" ({len(set(links))} distinct)",
                field=f"{where}.link_ids",
            )
        if not 0 < flow.mbps <= MAX_FLOW_MBPS:
            raise WireError(
                f"must be within 1..{MAX_FLOW_MBPS}, not {flow.mbps}", field=f"{where}.mbps"
            )
        flows.append(
            FlowHold(
                reservation_id=message.reservation_id,
                kind=flow.kind,
                peer=flow.peer,
                link_ids=links,
                mbps=flow.mbps,
                window=_window(flow.start_s, flow.end_s, "a flow", field=where),
            )
        )
    return tuple(flows)


def claim_of(message: ledger_pb2.PartClaim) -> Claim:
    """The claim of one part of a Prepare; raises WireError as `part_window` does."""
    compute = message.compute
    return Claim(
        reservation_id=message.reservation_id,
        request_id=message.request_id,
        tenant_id=message.tenant_id,
        site_id=compute.site_id or None,
        cpu_m=compute.cpu_m,
        mem_mib=compute.mem_mib,
        storage_gib=compute.storage_gib,
        accelerator_model=compute.accelerator_model or None,
        accelerator_milli=compute.accelerator_milli,
        link_ids=tuple(message.link_ids),
        mbps=message.mbps,
        window=part_window(message),
        counts_quota=message.count_quota,
        nodes=part_nodes(message),
    )


def part_nodes(message: ledger_pb2.PartClaim) -> int:
    """The nodes of one part's compute (0 is 1); raises WireError naming `nodes` when out of
    bounds or not dividing its amounts evenly (its accelerators into whole ones per node, or
    one fraction of one on one node)."""
    nodes = message.nodes or 1
    compute = message.compute
    amounts = (compute.cpu_m, compute.mem_mib)
    acc_milli = compute.accelerator_milli
    whole = acc_milli % (MILLI * nodes) == 0 or (nodes == 1 and acc_milli < MILLI)
    if not 1 <= nodes <= MAX_NODES or any(amount % nodes for amount in amounts) or not whole:
        raise WireError(
            f"nodes must be 1 to {MAX_NODES} and divide the compute evenly, not {message.nodes}",
            field="nodes",
        )
    return nodes
