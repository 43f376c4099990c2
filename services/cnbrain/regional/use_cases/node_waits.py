"""Queued gangs that wait for nodes: each option on a site with node pools whose nodes do not
hold the request's gang now starts no earlier than they will (`PlanOption.nodes_free_at`),
as the node takes the round read end (`ledger.node_starts`). The calendar counts the site's
totals, which may hold the gang long before its nodes do. The planner books on the nodes
each gang it plans to start now or that waits for its nodes (`take`), and starts the gangs
after it only where they fit around those (`free_from`: `backfill.NodeBook`). Preemption,
and room made for a request of another region, ask whether victims would free those nodes
(`freed`, `holds`)."""

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

from cnbrain.domain.errors import Invalid
from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.node_starts import SiteNodes, earliest_on_nodes
from cnbrain.ledger.nodes import Gang, NodeTake, Pool, gang_of
from cnbrain.ledger.snapshot import site_pools
from cnbrain.netmap.arrays import MapArrays
from cnbrain.scheduling.backfill import PlanOption

K = TypeVar("K", bound=Hashable)


def pools_by_site(arrays: MapArrays) -> dict[str, tuple[Pool, ...]]:
    """The node pools of the sites of `arrays`' map that describe their nodes, by site id."""
    return {arrays.map.sites[i].id: pools for i, pools in site_pools(arrays).items()}


def gang_or_none(request: PlacementRequest) -> Gang | None:
    """The gang of `request`'s resources (None: none can be made of them)."""
    try:
        return gang_of(request.resources)
    except Invalid:
        return None


class NodeWaits:
    """When gangs could start on the nodes of each site of `pools` (by site id), its node
    takes `held` as the round read them (each with its holder's end and request), from epoch
    second `now`; remembered per site and gang for the round."""

    def __init__(
        self,
        pools: Mapping[str, Sequence[Pool]],
        held: Mapping[str, Sequence[tuple[int, str, NodeTake]]],
        *,
        now: int,
    ) -> None:
        self._pools = pools
        self._held = held
        self._now = now
        self._known: dict[str, dict[Gang, int | None]] = {}
        self._sites: dict[str, SiteNodes] = {}
        self._gangs: dict[str, Gang] = {}
        self.pushed: dict[tuple[str, str], int] = {}
        """By (request id, site): the last start the nodes put a request's gang off to,
        past the start it was asked from (`free_from`)."""
        self._waiting: set[tuple[str, str]] = set()
        """(request id, site) of the options whose nodes do not hold the gang now."""
        self.planned_nodes: dict[str, tuple[str, tuple[NodeTake, ...]]] = {}
        """By request id: the site and the node takes of each gang booked to start now, for
        the ledger to take as planned (`Claim.node_takes`)."""

    def free_at(self, site: str, gang: Gang) -> int:
        """The epoch second from which `gang` fits the nodes of `site`: now when it does now,
        or when the site has no node pools or no node ever holds it (the engine's filters
        keep such a site from the request's options)."""
        at = self.earliest(site, gang)
        return self._now if at is None else at

    def earliest(self, site: str, gang: Gang) -> int | None:
        """`free_at`, but None when no node of the site's pools ever holds `gang`."""
        pools = self._pools.get(site)
        if pools is None:
            return self._now
        known = self._known.setdefault(site, {})
        if gang not in known:
            known[gang] = self._site(site, pools).earliest(gang, now=self._now)
        return known[gang]

    def _site(self, site: str, pools: Sequence[Pool]) -> SiteNodes:
        nodes = self._sites.get(site)
        if nodes is None:
            held = self._held.get(site, ())
            nodes = self._sites[site] = SiteNodes(pools, ((end, t) for end, _, t in held))
        return nodes

    def free_from(self, item_id: str, label: str, start: int, duration: int) -> int | None:
        """The earliest epoch second from `start` at which the nodes of site `label` hold
        the gang of request `item_id` (one `options` was given) for `duration` seconds,
        around the gangs booked (`take`); `start` for a request of no gang or a site without
        node pools; None when no node of the site ever holds it."""
        gang = self._gangs.get(item_id)
        at = start if gang is None else self.gang_free_from(label, gang, start, duration)
        if at is not None and at > start:
            self.pushed[(item_id, label)] = at
        return at

    def take(self, item_id: str, label: str, window: Window) -> None:
        """Book the gang of request `item_id` on the nodes of site `label` over `window`, as
        planned, when it starts now or waits for those nodes (they do not hold it now, or
        hold it only around the gangs booked before it): the gangs asked of `free_from`
        after it fit around it. A gang planned later for other reasons (the site's totals,
        its links) is not booked: its nodes are chosen when it starts."""
        gang = self._gangs.get(item_id)
        key = (item_id, label)
        if gang is None:
            return
        if window.start <= self._now:
            picked = self.book(label, gang, window)
            if picked:
                self.planned_nodes[item_id] = (label, tuple(picked))
        elif key in self._waiting or key in self.pushed:
            self.book(label, gang, window)

    def gang_free_from(self, site: str, gang: Gang, start: int, duration: int) -> int | None:
        """`free_from` for `gang` itself."""
        pools = self._pools.get(site)
        if pools is None:
            return start
        return self._site(site, pools).free_from(gang, start, duration, now=self._now)

    def book(self, site: str, gang: Gang, window: Window) -> list[NodeTake] | None:
        """Book `gang` on the nodes of `site` over `window`; the node takes booked (None on a
        site without node pools, or where its nodes do not hold it then)."""
        pools = self._pools.get(site)
        if pools is None:
            return None
        self._known.pop(site, None)
        return self._site(site, pools).book(gang, window.start, window.end, now=self._now)

    def options(
        self, request: PlacementRequest, options: tuple[PlanOption[K], ...]
    ) -> tuple[PlanOption[K], ...]:
        """`options` of `request`, each starting no earlier than its site's nodes hold the
        request's gang."""
        if not any(option.label in self._pools for option in options):
            return options
        gang = gang_or_none(request)
        if gang is None:
            return options
        self._gangs[request.id] = gang
        out = []
        for option in options:
            at = self.free_at(option.label, gang)
            if at > self._now:
                self._waiting.add((request.id, option.label))
            out.append(option if at <= self._now else replace(option, nodes_free_at=at))
        return tuple(out)

    def freed(self, request_id: str, site: str, victims: frozenset[str]) -> bool:
        """Whether the nodes of `site` hold the gang of request `request_id` (one `options`
        was given) once the requests `victims` give back what they take there."""
        gang = self._gangs.get(request_id)
        return gang is None or self.holds(site, gang, victims)

    def holds(self, site: str, gang: Gang, victims: frozenset[str] = frozenset()) -> bool:
        """Whether the nodes of `site` hold `gang` now, once the requests `victims` give back
        what they take there; a site without node pools holds it."""
        pools = self._pools.get(site)
        if pools is None:
            return True
        held = self._held.get(site, ())
        kept = [(end, take) for end, holder, take in held if holder not in victims]
        return earliest_on_nodes(pools, kept, gang, now=self._now) == self._now
