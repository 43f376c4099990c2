"""The map registry in the database: the map frame, sites and links, and their capacity rows.

Contract:

- The active sites and links, in registration order, plus the frame (name, regions, provinces,
  nodes) always form a valid map: every change is checked by building
  `ComputeNetworkMap.from_document` on the would-be document before anything is written, and is
  refused with a RegistryError carrying the MapError message otherwise.
- Registry changes are serialised by a row lock on `map_frame`, and each bumps
  `map_frame.version` (see `map_version`).
- Capacity rows hold caps in the engine's integer units (`cnbrain.netmap.arrays` converters);
  updates change caps and keep `used` (this brain's reservations) and `external` (reported).
- Retired sites and links keep their rows (reservations refer to them) with status "retired";
  registering a retired id again brings it back, at the end of the order.
- A site's `execution` (its cluster scheduler) is stored in its own column, not in the site's
  document; `load_document` and `site_execution` put it back (None stored: the simulator).
- Functions work inside the caller's transaction and never commit.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.backend_ref import SIMULATOR, BackendRef
from cnbrain.domain.network import Link
from cnbrain.domain.site import Site
from cnbrain.domain.states import ReservationState
from cnbrain.netmap.arrays import (
    accelerators_to_milli,
    cores_to_millicores,
    gbps_to_mbps,
    gib_to_mib,
    whole_gib,
)
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.document import MapDocument
from cnbrain.netmap.errors import MapError
from cnbrain.storage._sql import execute_counted, fetch_scalar
from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import SEED_LOCK, advisory_lock
from cnbrain.storage.errors import RegistryError, UnknownItem
from cnbrain.storage.models import (
    Base,
    LinkCapacity,
    LinkRecord,
    MapFrame,
    ReservationLink,
    ReservationRecord,
    SiteAccelerators,
    SiteCapacity,
    SiteRecord,
)

__all__ = [
    "RegistryError",
    "UnknownItem",
    "get_site",
    "is_empty",
    "load_document",
    "map_version",
    "register_link",
    "register_site",
    "report_link_usage",
    "report_site_usage",
    "retire_link",
    "retire_site",
    "seed_if_empty",
    "seed_map",
    "site_execution",
    "update_link",
    "update_site",
]

ACTIVE = "active"
"""The status of a site or link in use (the ledgers' too: `ledger_sql`)."""
RETIRED = "retired"
"""The status of a site or link taken off the map; it keeps its row, which reservations
refer to."""
_FRAME_FIELDS = frozenset({"sites", "links"})


async def is_empty(session: AsyncSession) -> bool:
    """True when no map has been seeded (no `map_frame` row)."""
    count = await fetch_scalar(session, select(func.count()).select_from(MapFrame))
    return not count


async def map_version(session: AsyncSession) -> int:
    """The registry's version: 1 after seeding, +1 per register/update/retire."""
    frame = await fetch_scalar(session, select(MapFrame))
    if frame is None:
        raise RegistryError("no map is registered: seed one first")
    return frame.version


async def seed_map(session: AsyncSession, *, document: MapDocument) -> None:
    """Store `document` (frame, sites, links, capacity rows) in an empty database.

    Raises RegistryError if a map is there already or the document is not a valid map.
    """
    if not await is_empty(session):
        raise RegistryError("the database holds a map already; seed only an empty one")
    _check(document)
    frame = document.model_dump(mode="json", exclude=set(_FRAME_FIELDS))
    session.add(MapFrame(name=document.name, document=frame, version=1, updated_at=utcnow()))
    await session.flush()
    now = utcnow()
    rows: list[tuple[type[Base], list[dict[str, Any]]]] = [
        (SiteRecord, [_site_row(site, i, now) for i, site in enumerate(document.sites)]),
        (LinkRecord, [_link_row(link, i, now) for i, link in enumerate(document.links)]),
        (SiteCapacity, [_site_capacity_row(site) for site in document.sites]),
        (SiteAccelerators, [row for site in document.sites for row in _accelerator_rows(site)]),
        (LinkCapacity, [_link_capacity_row(link) for link in document.links]),
    ]
    for model, values in rows:
        if values:
            await session.execute(insert(model), values)


async def seed_if_empty(session: AsyncSession, *, document: MapDocument) -> bool:
    """Seed `document` unless a map is there; True if it seeded. Safe when several replicas
    start at once: they take turns on an advisory lock (PostgreSQL) or the write lock (SQLite).
    """
    await advisory_lock(session, SEED_LOCK)
    if not await is_empty(session):
        return False
    await seed_map(session, document=document)
    return True


async def load_document(session: AsyncSession) -> MapDocument:
    """The map as registered: the frame plus active sites and links in registration order."""
    frame = await fetch_scalar(session, select(MapFrame))
    if frame is None:
        raise RegistryError("no map is registered: seed one first")
    sites = await session.execute(
        select(SiteRecord.document, SiteRecord.execution)
        .where(SiteRecord.status == ACTIVE)
        .order_by(SiteRecord.position)
    )
    links = await session.scalars(
        select(LinkRecord.document).where(LinkRecord.status == ACTIVE).order_by(LinkRecord.position)
    )
    return MapDocument.model_validate(
        {
            **frame.document,
            "sites": [_with_execution(document, execution) for document, execution in sites],
            "links": list(links),
        }
    )


async def site_execution(session: AsyncSession, *, site_id: str) -> BackendRef:
    """The cluster scheduler of the site, active or retired (the simulator when it names
    none). Raises UnknownItem for a site never registered."""
    row = (
        await session.execute(select(SiteRecord.execution).where(SiteRecord.id == site_id))
    ).first()
    if row is None:
        raise UnknownItem(f"site {site_id!r} is not registered")
    return SIMULATOR if row[0] is None else BackendRef.model_validate(row[0])


async def get_site(session: AsyncSession, *, site_id: str) -> Site | None:
    """The site as registered, active or retired (None: never registered)."""
    row = (
        await session.execute(
            select(SiteRecord.document, SiteRecord.execution).where(SiteRecord.id == site_id)
        )
    ).first()
    return None if row is None else Site.model_validate(_with_execution(row[0], row[1]))


def _with_execution(document: dict[str, Any], execution: dict[str, Any] | None) -> dict[str, Any]:
    return document if execution is None else {**document, "execution": execution}


def _site_document(site: Site) -> dict[str, Any]:
    return site.model_dump(mode="json", exclude={"execution"})


def _execution_json(site: Site) -> dict[str, Any]:
    """The site's BackendRef as JSON: its kind and the fields that differ from the defaults."""
    return site.execution.model_dump(mode="json", exclude_defaults=True)


async def register_site(session: AsyncSession, *, site: Site, links: Sequence[Link] = ()) -> None:
    """Add `site`, with the `links` that attach it to the network (a site without links cannot
    reach its gateway, so the map check needs them in the same change)."""
    frame = await _lock_frame(session)
    record = await session.get(SiteRecord, site.id)
    if record is not None and record.status == ACTIVE:
        raise RegistryError(f"site {site.id!r} is registered already")
    link_records = await _new_link_records(session, links)
    document = await load_document(session)
    _check(
        document.model_copy(
            update={"sites": (*document.sites, site), "links": (*document.links, *links)}
        )
    )
    position = await _next_position(session, SiteRecord)
    if record is None:
        await session.execute(insert(SiteRecord).values(_site_row(site, position, utcnow())))
        await session.execute(insert(SiteCapacity).values(_site_capacity_row(site)))
    else:
        _revive(record, _site_document(site), position)
        record.execution = _execution_json(site)
        record.province = site.province
        await _set_site_caps(session, site, reset_external=True)
    await _set_accelerator_caps(session, site, reset_external=record is not None)
    await _add_links(session, links, link_records)
    _bump(frame)
    await session.flush()


async def update_site(
    session: AsyncSession,
    *,
    site: Site,
    check_execution: Callable[[BackendRef], None] | None = None,
) -> None:
    """Replace the registered site `site.id` by `site` (same place in the order); caps follow
    its capacity, `used` and `external` stay (caps may drop below them: no new reservation fits
    until they go down). `check_execution` is called with the site's stored `execution` once
    the registry is locked, before anything is written; what it raises aborts the update."""
    frame = await _lock_frame(session)
    record = await _active_site(session, site.id)
    if check_execution is not None:
        stored = record.execution
        check_execution(SIMULATOR if stored is None else BackendRef.model_validate(stored))
    document = await load_document(session)
    sites = tuple(site if s.id == site.id else s for s in document.sites)
    _check(document.model_copy(update={"sites": sites}))
    record.document = _site_document(site)
    record.execution = _execution_json(site)
    record.province = site.province
    record.version += 1
    record.updated_at = utcnow()
    await _set_site_caps(session, site, reset_external=False)
    await _set_accelerator_caps(session, site, reset_external=False)
    _bump(frame)
    await session.flush()


async def retire_site(session: AsyncSession, *, site_id: str) -> None:
    """Retire the site and the links that attach it (they join nothing else).

    Refused while the site holds reservations, or if the map would be invalid without it.
    """
    frame = await _lock_frame(session)
    record = await _active_site(session, site_id, lock=True)
    held = await fetch_scalar(
        session,
        select(func.count())
        .select_from(ReservationRecord)
        .where(
            ReservationRecord.site_id == site_id, ReservationRecord.state == ReservationState.HELD
        ),
    )
    if held:
        raise RegistryError(f"site {site_id!r} holds {held} reservation(s); release them first")
    document = await load_document(session)
    attached = [link for link in document.links if site_id in (link.a, link.b)]
    _check(
        document.model_copy(
            update={
                "sites": tuple(s for s in document.sites if s.id != site_id),
                "links": tuple(link for link in document.links if link not in attached),
            }
        )
    )
    _retire(record)
    for link in attached:
        _retire(await _active_link(session, link.id, lock=True))
    _bump(frame)
    await session.flush()


async def register_link(session: AsyncSession, *, link: Link) -> None:
    """Add `link` between two registered nodes or a node and a site."""
    frame = await _lock_frame(session)
    records = await _new_link_records(session, [link])
    document = await load_document(session)
    _check(document.model_copy(update={"links": (*document.links, link)}))
    await _add_links(session, [link], records)
    _bump(frame)
    await session.flush()


async def update_link(session: AsyncSession, *, link: Link) -> None:
    """Replace the registered link `link.id`; its bandwidth cap follows, used/external stay."""
    frame = await _lock_frame(session)
    record = await _active_link(session, link.id)
    document = await load_document(session)
    links = tuple(link if existing.id == link.id else existing for existing in document.links)
    _check(document.model_copy(update={"links": links}))
    record.document = link.model_dump(mode="json")
    record.version += 1
    record.updated_at = utcnow()
    await execute_counted(
        session,
        update(LinkCapacity)
        .where(LinkCapacity.link_id == link.id)
        .values(mbps_cap=gbps_to_mbps(link.bandwidth_gbps)),
    )
    _bump(frame)
    await session.flush()


async def retire_link(session: AsyncSession, *, link_id: str) -> None:
    """Retire a link; refused while reservations hold bandwidth on it, or if the map would be
    invalid without it (say, a site or access node cut off from its gateway)."""
    frame = await _lock_frame(session)
    record = await _active_link(session, link_id, lock=True)
    held = await fetch_scalar(
        session,
        select(func.count())
        .select_from(ReservationLink)
        .join(ReservationRecord, ReservationRecord.id == ReservationLink.reservation_id)
        .where(
            ReservationLink.link_id == link_id, ReservationRecord.state == ReservationState.HELD
        ),
    )
    if held:
        raise RegistryError(f"link {link_id!r} holds {held} reservation(s); release them first")
    document = await load_document(session)
    links = tuple(link for link in document.links if link.id != link_id)
    _check(document.model_copy(update={"links": links}))
    _retire(record)
    _bump(frame)
    await session.flush()


async def report_site_usage(
    session: AsyncSession,
    *,
    site_id: str,
    cpu_m: int,
    mem_mib: int,
    storage_gib: int,
    accelerators: Mapping[str, int],
) -> None:
    """Set what others use on the site (its `external` columns), as the site reports it, in
    the ledger's units (`accelerators`: thousandths of accelerators by model).

    The report is complete: accelerator models it leaves out are reported as 0 in use.
    """
    await _active_site(session, site_id)
    amounts = {"cpu_m": cpu_m, "mem_mib": mem_mib, "storage_gib": storage_gib, **accelerators}
    for name, amount in amounts.items():
        if amount < 0:
            raise RegistryError(f"site {site_id!r}: reported usage {name} is negative ({amount})")
    rows = {
        row.model: row
        for row in await session.scalars(
            select(SiteAccelerators).where(SiteAccelerators.site_id == site_id)
        )
    }
    for model, count in accelerators.items():
        if model not in rows and count > 0:
            raise RegistryError(f"site {site_id!r}: has no {model!r} accelerators to report on")
    await execute_counted(
        session,
        update(SiteCapacity)
        .where(SiteCapacity.site_id == site_id)
        .values(cpu_m_external=cpu_m, mem_mib_external=mem_mib, storage_gib_external=storage_gib),
    )
    for model, row in rows.items():
        row.external = accelerators.get(model, 0)
    await session.flush()


async def report_link_usage(session: AsyncSession, *, link_id: str, mbps: int) -> None:
    """Set the bandwidth others use on the link (its `external` column)."""
    await _active_link(session, link_id)
    if mbps < 0:
        raise RegistryError(f"link {link_id!r}: reported usage is negative ({mbps})")
    await execute_counted(
        session,
        update(LinkCapacity).where(LinkCapacity.link_id == link_id).values(mbps_external=mbps),
    )


def _check(document: MapDocument) -> None:
    try:
        ComputeNetworkMap.from_document(document)
    except MapError as exc:
        raise RegistryError(str(exc)) from None


async def _lock_frame(session: AsyncSession) -> MapFrame:
    frame = await fetch_scalar(session, select(MapFrame).with_for_update())
    if frame is None:
        raise RegistryError("no map is registered: seed one first")
    return frame


def _bump(frame: MapFrame) -> None:
    frame.version += 1
    frame.updated_at = utcnow()


async def _active_site(session: AsyncSession, site_id: str, *, lock: bool = False) -> SiteRecord:
    query = select(SiteRecord).where(SiteRecord.id == site_id)
    record = await fetch_scalar(session, query.with_for_update() if lock else query)
    if record is None or record.status != ACTIVE:
        raise UnknownItem(f"site {site_id!r} is not registered")
    return record


async def _active_link(session: AsyncSession, link_id: str, *, lock: bool = False) -> LinkRecord:
    query = select(LinkRecord).where(LinkRecord.id == link_id)
    record = await fetch_scalar(session, query.with_for_update() if lock else query)
    if record is None or record.status != ACTIVE:
        raise UnknownItem(f"link {link_id!r} is not registered")
    return record


async def _new_link_records(
    session: AsyncSession, links: Iterable[Link]
) -> dict[str, LinkRecord | None]:
    """The existing (retired) record per new link id; RegistryError if one is active."""
    found: dict[str, LinkRecord | None] = {}
    for link in links:
        if link.id in found:
            raise RegistryError(f"link {link.id!r} appears more than once")
        record = await session.get(LinkRecord, link.id)
        if record is not None and record.status == ACTIVE:
            raise RegistryError(f"link {link.id!r} is registered already")
        found[link.id] = record
    return found


async def _add_links(
    session: AsyncSession, links: Sequence[Link], records: Mapping[str, LinkRecord | None]
) -> None:
    position = await _next_position(session, LinkRecord)
    now = utcnow()
    for offset, link in enumerate(links):
        record = records[link.id]
        if record is None:
            await session.execute(
                insert(LinkRecord).values(_link_row(link, position + offset, now))
            )
            await session.execute(insert(LinkCapacity).values(_link_capacity_row(link)))
        else:
            _revive(record, link.model_dump(mode="json"), position + offset)
            await execute_counted(
                session,
                update(LinkCapacity)
                .where(LinkCapacity.link_id == link.id)
                .values(mbps_cap=gbps_to_mbps(link.bandwidth_gbps), mbps_external=0),
            )


async def _next_position(session: AsyncSession, model: type[SiteRecord] | type[LinkRecord]) -> int:
    highest = await fetch_scalar(session, select(func.max(model.position)))
    return 0 if highest is None else highest + 1


def _revive(record: SiteRecord | LinkRecord, document: dict[str, Any], position: int) -> None:
    record.document = document
    record.status = ACTIVE
    record.position = position
    record.version += 1
    record.updated_at = utcnow()


def _retire(record: SiteRecord | LinkRecord) -> None:
    record.status = RETIRED
    record.version += 1
    record.updated_at = utcnow()


def _site_row(site: Site, position: int, now: datetime) -> dict[str, Any]:
    return {
        "id": site.id,
        "position": position,
        "province": site.province,
        "document": _site_document(site),
        "execution": _execution_json(site),
        "status": ACTIVE,
        "version": 1,
        "updated_at": now,
    }


def _link_row(link: Link, position: int, now: datetime) -> dict[str, Any]:
    return {
        "id": link.id,
        "position": position,
        "document": link.model_dump(mode="json"),
        "status": ACTIVE,
        "version": 1,
        "updated_at": now,
    }


def _site_caps(site: Site) -> dict[str, int]:
    capacity = site.capacity
    return {
        "cpu_m_cap": cores_to_millicores(capacity.cpu_cores),
        "mem_mib_cap": gib_to_mib(capacity.memory_gib),
        "storage_gib_cap": whole_gib(capacity.storage_gib),
    }


def _site_capacity_row(site: Site) -> dict[str, Any]:
    return {"site_id": site.id, **_site_caps(site)} | dict.fromkeys(
        (f"{r}_{c}" for r in ("cpu_m", "mem_mib", "storage_gib") for c in ("used", "external")), 0
    )


def _accelerator_rows(site: Site) -> list[dict[str, Any]]:
    return [
        {
            "site_id": site.id,
            "model": model,
            "cap": accelerators_to_milli(count),
            "used": 0,
            "external": 0,
        }
        for model, count in site.capacity.accelerators.items()
        if count > 0
    ]


def _link_capacity_row(link: Link) -> dict[str, Any]:
    return {
        "link_id": link.id,
        "mbps_cap": gbps_to_mbps(link.bandwidth_gbps),
        "mbps_used": 0,
        "mbps_external": 0,
    }


async def _set_site_caps(session: AsyncSession, site: Site, *, reset_external: bool) -> None:
    values: dict[str, int] = _site_caps(site)
    if reset_external:
        values |= {"cpu_m_external": 0, "mem_mib_external": 0, "storage_gib_external": 0}
    await execute_counted(
        session, update(SiteCapacity).where(SiteCapacity.site_id == site.id).values(**values)
    )


async def _set_accelerator_caps(session: AsyncSession, site: Site, *, reset_external: bool) -> None:
    """Caps per model from the site's capacity, in thousandths of accelerators; models it no
    longer has keep their row at cap 0 (their `used` may still be held)."""
    wanted = {m: accelerators_to_milli(n) for m, n in site.capacity.accelerators.items() if n > 0}
    rows = {
        row.model: row
        for row in await session.scalars(
            select(SiteAccelerators).where(SiteAccelerators.site_id == site.id)
        )
    }
    for model, row in rows.items():
        row.cap = wanted.get(model, 0)
        if reset_external:
            row.external = 0
    for model, count in wanted.items():
        if model not in rows:
            session.add(
                SiteAccelerators(site_id=site.id, model=model, cap=count, used=0, external=0)
            )
