"""A reservation held on a site of a registered map, for tests of what the registry refuses
while one is held."""

from cnbrain.domain.network import Link
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.document import MapDocument
from cnbrain.storage import ledger_store
from cnbrain.storage.models import Tenant
from cnbrain.storage.requests import NewRequest, insert_requests
from cnbrain.storage.tenants import create_tenant, create_user
from tests.databases import Sessions
from tests.ledger.claims import claim


def attachments(document: MapDocument, site_id: str) -> list[Link]:
    """The links that attach `site_id`."""
    return [link for link in document.links if site_id in (link.a, link.b)]


async def hold(sessions: Sessions, arrays: MapArrays, site_index: int) -> str:
    """A held reservation of 1 core on the site, over its first attachment link."""
    site = arrays.map.sites[site_index]
    link = attachments(arrays.map.document, site.id)[0]
    async with sessions.begin() as session:
        if await session.get(Tenant, "acme") is None:
            await create_tenant(session, tenant_id="acme", name="Acme")
            await create_user(
                session, user_id="alice", name="Alice", role="tenant-user", tenant_id="acme"
            )
        await insert_requests(
            session,
            [NewRequest(request_id=f"req-{site.id}", tenant_id="acme", user_id="alice", body={})],
        )
        held = claim(
            f"rsv-{site.id}",
            f"req-{site.id}",
            "acme",
            site_id=site.id,
            cpu_m=1000,
            mem_mib=1024,
            link_ids=(link.id,),
            mbps=100,
        )
        await ledger_store.reserve_many(session, claims=[held])
    return f"rsv-{site.id}"
