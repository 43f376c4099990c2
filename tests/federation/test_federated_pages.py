"""The federation's listing and usage merged from every region's pages
(`regional.federated_pages`): every item listed once over the pages, whatever the regions'
page sizes; cursors that work as a brain's own, and tampered ones refused naming `cursor`;
a region's page out of its contract refused naming the region."""

import base64
import json
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cnbrain.domain.errors import Invalid
from cnbrain.domain.states import RequestState
from cnbrain.federation.forward_queries import MAX_CURSOR
from cnbrain.regional.federated_pages import (
    MAX_ID,
    MIN_ID,
    UsageCursor,
    WrongPageError,
    merge_reports,
    merge_requests,
    merge_usage,
    request_cursor,
    request_cursor_of,
    usage_cursor,
)
from cnbrain.regional.forwarding import fitted
from cnbrain.regional.schemas import (
    RequestPage,
    RequestView,
    UsagePage,
    UsageReport,
    UsageReportRow,
    UsageTotals,
    UsageView,
)
from cnbrain.storage._sql import decode_keyset, encode_keyset

T0 = datetime(2026, 12, 1, tzinfo=UTC)
START, END = T0 - timedelta(days=1), T0 + timedelta(days=1)


def _view(
    request_id: str, at: datetime, *, tenant: str = "acme", state: str = "placed"
) -> RequestView:
    return RequestView(
        id=request_id,
        tenant=tenant,
        state=RequestState(state),
        reason=None,
        site=None,
        created_at=at,
        updated_at=at,
        request=None,
        decision=None,
    )


def _region_listing(views: list[RequestView]) -> Callable[[str | None, int], RequestPage]:
    """A region's own listing, as `storage.requests.list_requests` pages it: newest first by
    (created_at, id), after the keyset its cursor holds, `limit` at most."""
    ordered = sorted(views, key=lambda v: (v.created_at, v.id), reverse=True)

    def page(cursor: str | None, limit: int) -> RequestPage:
        rows = ordered
        if cursor is not None:
            at, last = decode_keyset(cursor, str)
            rows = [v for v in rows if (v.created_at, v.id) < (at, last)]
        more = len(rows) > limit
        items = rows[:limit]
        return RequestPage(
            items=items,
            next_cursor=encode_keyset(items[-1].created_at, items[-1].id) if more else None,
        )

    return page


def _requests_of(regions: int, per_region: int, seed: int) -> dict[str, list[RequestView]]:
    """Requests of `regions` regions, created at interleaved moments, many at the same one."""
    rng = random.Random(seed)
    return {
        f"r{n}": [
            _view(f"req-{n}-{i:04d}", T0 + timedelta(seconds=rng.randint(0, per_region // 3)))
            for i in range(per_region)
        ]
        for n in range(regions)
    }


def _list_all(
    held: dict[str, list[RequestView]], limit: int, *, short: dict[str, int] | None = None
) -> list[list[str]]:
    """Every page of the federation's listing, paged with its own cursors; a region of
    `short` gives at most that many requests a page (as a region whose page is too large
    for the wire does)."""
    listings = {region: _region_listing(views) for region, views in held.items()}
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        after = request_cursor(cursor) if cursor is not None else None
        parts = []
        for region, listing in listings.items():
            page = listing(cursor, limit)
            cap = (short or {}).get(region)
            if cap is not None and len(page.items) > cap:
                last = page.items[cap - 1]
                page = RequestPage(
                    items=page.items[:cap], next_cursor=request_cursor_of(last.created_at, last.id)
                )
            parts.append((region, page))
        merged = merge_requests(parts, limit=limit, after=after, state=None, tenant="acme")
        assert len(merged.items) <= limit
        pages.append([v.id for v in merged.items])
        if merged.next_cursor is None:
            return pages
        assert len(pages) < 1000, "the listing ends"
        cursor = merged.next_cursor


@pytest.mark.parametrize(("limit", "seed"), [(1, 1), (7, 2), (50, 3), (500, 4)])
def test_the_merged_listing_lists_every_request_once_newest_first(limit: int, seed: int) -> None:
    held = _requests_of(3, 120, seed)
    pages = _list_all(held, limit)
    listed = [request_id for page in pages for request_id in page]
    everything = sorted(
        (v for views in held.values() for v in views),
        key=lambda v: (v.created_at, v.id),
        reverse=True,
    )
    assert listed == [v.id for v in everything]
    assert len(pages) == -(-len(everything) // limit), "full pages but the last"


def test_a_region_giving_short_pages_bounds_the_merged_page_and_nothing_is_lost() -> None:
    held = _requests_of(3, 90, 5)
    pages = _list_all(held, 40, short={"r1": 3})
    listed = [request_id for page in pages for request_id in page]
    assert len(listed) == len(set(listed)) == 270
    assert len(pages) > 270 // 40 + 1, "short pages make more pages"


def test_a_merged_cursor_is_a_brain_s_own_listing_cursor() -> None:
    at = T0 + timedelta(microseconds=123)
    cursor = request_cursor_of(at, "req-1")
    assert decode_keyset(cursor, str) == (at, "req-1")
    assert request_cursor(encode_keyset(at, "req-1")) == (at, "req-1")


def _b64(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "not base64 !",
        "x" * (MAX_CURSOR + 1),
        _b64({"at": "2026-12-01T00:00:00+00:00"}),
        _b64(["2026-12-01T00:00:00+00:00"]),
        _b64(["2026-12-01T00:00:00+00:00", "req-1", 3]),
        _b64(["yesterday", "req-1"]),
        _b64([17, "req-1"]),
        _b64(["2026-12-01T00:00:00+00:00", "req 1; drop"]),
        _b64(["2026-12-01T00:00:00+00:00", 12]),
        _b64(["2026-12-01T00:00:00+00:00", "x" * 65]),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
def test_a_tampered_listing_cursor_is_refused_naming_the_cursor(cursor: str) -> None:
    with pytest.raises(Invalid) as refused:
        request_cursor(cursor)
    assert refused.value.field == "cursor"


@pytest.mark.parametrize(
    "cursor",
    [
        _b64(["2026-12-01T00:00:00+00:00", "r1"]),
        _b64(["2026-12-01T00:00:00+00:00", "r1", MAX_ID + 1]),
        _b64(["2026-12-01T00:00:00+00:00", "r1", True]),
        _b64(["2026-12-01T00:00:00+00:00", "r 1", 3]),
        _b64(["2026-12-01T00:00:00+00:00", "r1", 3.5]),
        _b64(["2026-13-01", "r1", 3]),
    ],
)
def test_a_tampered_usage_cursor_is_refused_naming_the_cursor(cursor: str) -> None:
    with pytest.raises(Invalid) as refused:
        usage_cursor(cursor)
    assert refused.value.field == "cursor"


def _page(views: list[RequestView], *, more: bool = False) -> RequestPage:
    last = views[-1] if views else None
    cursor = request_cursor_of(last.created_at, last.id) if more and last else None
    return RequestPage(items=views, next_cursor=cursor)


@pytest.mark.parametrize(
    ("page", "after", "words"),
    [
        (_page([_view("a", T0), _view("b", T0 + timedelta(seconds=1))]), None, "out of order"),
        (_page([_view("a", T0)]), (T0 - timedelta(seconds=1), "z"), "not after the cursor"),
        (_page([_view("a", T0)]), (T0, "a"), "not after the cursor"),
        (_page([], more=False).model_copy(update={"next_cursor": "x"}), None, "no item"),
        (_page([_view("a", T0, tenant="globex")]), None, "tenant"),
        (_page([_view("a", T0, state="queued")]), None, "is not placed"),
        (_page([_view(f"a{i}", T0 - timedelta(seconds=i)) for i in range(3)]), None, "at most 2"),
        (_page([_view("mine", T0)]), None, "another region"),
    ],
)
def test_a_region_s_page_out_of_contract_is_refused_naming_the_region(
    page: RequestPage, after: tuple[datetime, str] | None, words: str
) -> None:
    own = ("here", _page([_view("mine", T0 - timedelta(hours=1))]))
    with pytest.raises(WrongPageError) as refused:
        merge_requests([own, ("there", page)], limit=2, after=after, state="placed", tenant="acme")
    assert refused.value.region == "there"
    assert words in refused.value.reason


def _record(record_id: int, at: datetime, tenant: str = "acme", site: str = "s") -> UsageView:
    return UsageView(
        id=record_id,
        tenant=tenant,
        request="req-1",
        attempt=1,
        site=site,
        backend_job_id=None,
        simulated=True,
        started_at=at - timedelta(minutes=1),
        ended_at=at,
        elapsed_s=60.0,
        cpus=1,
        memory_mib=1024,
        gpus=0,
        accelerator_model=None,
        bandwidth_gbps=0.0,
        cpu_core_hours=1.0,
        memory_gib_hours=1.0,
        accelerator_hours=0.0,
        compute_cost_cny=1.0,
        network_cost_cny=0.5,
        cost_cny=1.5,
        source="simulator",
    )


def _totals(records: int, cost: float) -> UsageTotals:
    return UsageTotals(
        records=records,
        elapsed_s=60.0 * records,
        cpu_core_hours=float(records),
        memory_gib_hours=float(records),
        accelerator_hours=0.0,
        compute_cost_cny=cost,
        network_cost_cny=0.0,
        cost_cny=cost,
    )


def test_merged_usage_lists_every_record_once_though_regions_share_ids_and_moments() -> None:
    rng = random.Random(7)
    held = {
        region: sorted(
            (
                _record(i, T0 + timedelta(seconds=rng.randint(0, 20)), site=region)
                for i in range(1, 61)
            ),
            key=lambda r: (r.ended_at, r.id),
        )
        for region in ("east", "north", "west")
    }

    def region_page(region: str, cursor: str | None, limit: int) -> UsagePage:
        rows = held[region]
        if cursor is not None:
            at, last = decode_keyset(cursor, int)
            rows = [r for r in rows if (r.ended_at, r.id) > (at, last)]
        items = rows[:limit]
        more = len(rows) > limit
        return UsagePage(
            tenant="acme",
            start=START,
            end=END,
            totals=_totals(len(held[region]), 1.5 * len(held[region])),
            items=items,
            next_cursor=encode_keyset(items[-1].ended_at, items[-1].id) if more else None,
        )

    listed: list[tuple[datetime, str, int]] = []
    cursor: str | None = None
    pages = 0
    while True:
        after = usage_cursor(cursor) if cursor is not None else None
        parts = [
            (region, region_page(region, None if after is None else after.local_for(region), 25))
            for region in held
        ]
        merged = merge_usage(parts, limit=25, after=after, tenant="acme", start=START, end=END)
        assert merged.totals.records == 180
        assert merged.totals.cost_cny == pytest.approx(270.0)
        pages += 1
        assert len(merged.items) <= 25
        listed.extend((r.ended_at, r.site, r.id) for r in merged.items)
        if merged.next_cursor is None:
            break
        cursor = merged.next_cursor
    assert pages == 180 // 25 + 1
    everything = sorted((r.ended_at, r.site, r.id) for records in held.values() for r in records)
    assert listed == everything, "every record once, by end, region and id"


def test_a_usage_cursor_gives_each_region_its_own_position() -> None:
    cursor = UsageCursor(at=T0, region="north", id=42)
    assert usage_cursor(cursor.text()) == cursor
    assert decode_keyset(cursor.local_for("north"), int) == (T0, 42)
    assert decode_keyset(cursor.local_for("east"), int) == (T0, MAX_ID)
    assert decode_keyset(cursor.local_for("west"), int) == (T0, MIN_ID)


def test_a_usage_page_of_another_period_or_out_of_it_is_refused() -> None:
    good = UsagePage(
        tenant="acme", start=START, end=END, totals=_totals(0, 0), items=[], next_cursor=None
    )
    other = good.model_copy(update={"end": END + timedelta(seconds=1)})
    outside = good.model_copy(update={"items": [_record(1, END + timedelta(hours=1))]})
    for page in (other, outside):
        with pytest.raises(WrongPageError) as refused:
            merge_usage(
                [("here", good), ("there", page)],
                limit=5,
                after=None,
                tenant="acme",
                start=START,
                end=END,
            )
        assert refused.value.region == "there"


def _row(tenant: str, site: str, records: int) -> UsageReportRow:
    return UsageReportRow(
        tenant=tenant, site=site, simulated=False, **_totals(records, records * 2.0).model_dump()
    )


def test_merged_reports_keep_every_row_and_sum_each_tenant() -> None:
    east = UsageReport(
        start=START,
        end=END,
        rows=[_row("acme", "E-hub", 2), _row("globex", "E-hub", 1)],
        tenants={"acme": _totals(2, 4.0), "globex": _totals(1, 2.0)},
    )
    north = UsageReport(
        start=START, end=END, rows=[_row("acme", "BJ-hub", 3)], tenants={"acme": _totals(3, 6.0)}
    )
    merged = merge_reports([("east", east), ("north", north)], tenant=None, start=START, end=END)
    assert [(r.tenant, r.site) for r in merged.rows] == [
        ("acme", "BJ-hub"),
        ("acme", "E-hub"),
        ("globex", "E-hub"),
    ]
    assert merged.tenants["acme"].records == 5
    assert merged.tenants["acme"].cost_cny == pytest.approx(10.0)
    assert merged.tenants["globex"].records == 1
    with pytest.raises(WrongPageError):
        merge_reports([("east", east), ("north", north)], tenant="acme", start=START, end=END)


def test_a_page_too_large_for_the_wire_leaves_its_last_requests_to_the_next_page() -> None:
    views = [_view(f"req-{i:03d}", T0 - timedelta(seconds=i)) for i in range(40)]
    page = RequestPage(items=views, next_cursor=None)
    whole = page.model_dump_json()
    assert fitted(page, most=len(whole)) == whole
    cut = RequestPage.model_validate_json(fitted(page, most=len(whole) // 2))
    assert 0 < len(cut.items) < 40
    assert cut.items == views[: len(cut.items)]
    assert cut.next_cursor is not None
    assert decode_keyset(cut.next_cursor, str) == (cut.items[-1].created_at, cut.items[-1].id)
