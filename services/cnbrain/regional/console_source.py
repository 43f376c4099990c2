"""What the regional brain's console shows (`cnbrain.console`): its map with the load of its
own sites and links as its ledger holds it, to callers with its API keys."""

from collections.abc import Callable, Sequence

from cnbrain.console.map_view import map_view, snapshot_loads
from cnbrain.console.views import Brain, MapView, Page, Viewer
from cnbrain.regional.composition import RegionalBrain

PAGES: tuple[Page, ...] = ("map", "queue", "requests", "tenants")


class RegionalConsole:
    """The console's source on a regional brain; `brain` gives the running brain."""

    brain: Brain = "regional"
    pages: Sequence[Page] = PAGES

    def __init__(self, brain: Callable[[], RegionalBrain]) -> None:
        self._brain = brain

    def region(self) -> str | None:
        return self._brain().settings.region

    def map_name(self) -> str:
        return self._brain().live_map.map.name

    async def viewer(self, token: str) -> Viewer | None:
        principal = await self._brain().authenticator.principal_of(token)
        if principal is None:
            return None
        return Viewer(
            user=principal.user_id,
            role=str(principal.role),
            tenant=principal.tenant_id,
            staff=principal.is_staff,
        )

    async def map_view(self) -> MapView:
        live_map = self._brain().live_map
        snapshot = (await live_map.snapshot())[0]
        cmap = snapshot.arrays.map
        owner = live_map.owner
        owned = live_map.ownership
        site_load, link_load = snapshot_loads(snapshot, sites=owned.sites, links=owned.links)
        return map_view(
            cmap,
            owner=owner,
            site_load=site_load,
            link_load=link_load,
            load_note="from this brain's ledger: what its reservations, and the use operators "
            "reported, hold now"
            + ("" if owner is None else f"; only region {owner}'s sites and links"),
        )
