"""Wire forms of paths and reservation parts (cnbrain.v1 messages) and back."""

import json
from collections.abc import Mapping

import numpy as np

from cnbrain.domain.bounds import MAX_EPOCH_S, MAX_WINDOW_S
from cnbrain.domain.errors import Invalid
from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import Claim
from cnbrain.netmap.arrays import IntArray, MapArrays
from cnbrain.placement.request_check import parse_request
from cnbrain.routing.paths import GraphPath
from cnbrain.v1 import common_pb2, ledger_pb2


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


def part_message(claim: Claim) -> ledger_pb2.PartClaim:
    """The wire form of one part, for a Prepare."""
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
            accelerator_count=claim.accelerator_count,
        ),
        link_ids=list(claim.link_ids),
        mbps=claim.mbps,
        count_quota=claim.counts_quota,
        start_s=claim.window.start,
        end_s=claim.window.end,
    )


def part_window(message: ledger_pb2.PartClaim) -> Window:
    """The window of one part of a Prepare; raises WireError when it has none (a sender
    that predates windows), a malformed one, or one out of bounds: before epoch second 0,
    past `MAX_EPOCH_S`, or longer than `MAX_WINDOW_S`."""
    start, end = message.start_s, message.end_s
    if start >= end:
        raise WireError(
            f"a part needs a window [start_s, end_s) with start_s < end_s, not [{start}, {end})"
        )
    if start < 0 or end > MAX_EPOCH_S or end - start > MAX_WINDOW_S:
        raise WireError(
            f"a part's window [{start}, {end}) must lie within [0, {MAX_EPOCH_S}] and last at"
            f" most {MAX_WINDOW_S} s"
        )
    return Window(start, end)


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
        accelerator_count=compute.accelerator_count,
        link_ids=tuple(message.link_ids),
        mbps=message.mbps,
        window=part_window(message),
        counts_quota=message.count_quota,
    )
