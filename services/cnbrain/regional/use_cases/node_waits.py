"""Queued gangs that wait for nodes: each option on a site with node pools whose nodes do not
hold the request's gang now starts no earlier than they will (`PlanOption.nodes_free_at`),
as the node takes the round read end (`ledger.node_starts`). The calendar counts the site's
totals, which may hold the gang long before its nodes do."""

from collections.abc import Mapping, Sequence
from dataclasses import replace

from cnbrain.domain.errors import Invalid
from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.keys import ResourceKey
from cnbrain.ledger.node_starts import Ending, earliest_on_nodes
from cnbrain.ledger.nodes import Gang, Pool, gang_of
from cnbrain.scheduling.backfill import PlanOption


class NodeWaits:
    """When gangs could start on the nodes of each site of `pools` (by site id), its node
    takes `ending` as the round read them, from epoch second `now`; remembered per site and
    gang for the round."""

    def __init__(
        self,
        pools: Mapping[str, Sequence[Pool]],
        ending: Mapping[str, Sequence[Ending]],
        *,
        now: int,
    ) -> None:
        self._pools = pools
        self._ending = ending
        self._now = now
        self._known: dict[tuple[str, Gang], int] = {}

    def free_at(self, site: str, gang: Gang) -> int:
        """The epoch second from which `gang` fits the nodes of `site`: now when it does now,
        or when the site has no node pools or no node ever holds it (the engine's filters
        keep such a site from the request's options)."""
        pools = self._pools.get(site)
        if pools is None:
            return self._now
        key = (site, gang)
        found = self._known.get(key)
        if found is None:
            at = earliest_on_nodes(pools, self._ending.get(site, ()), gang, now=self._now)
            found = self._known[key] = self._now if at is None else at
        return found

    def options(
        self, request: PlacementRequest, options: tuple[PlanOption[ResourceKey], ...]
    ) -> tuple[PlanOption[ResourceKey], ...]:
        """`options` of `request`, each starting no earlier than its site's nodes hold the
        request's gang."""
        if not any(option.label in self._pools for option in options):
            return options
        try:
            gang = gang_of(request.resources)
        except Invalid:
            return options
        out = []
        for option in options:
            at = self.free_at(option.label, gang)
            out.append(option if at <= self._now else replace(option, nodes_free_at=at))
        return tuple(out)
