"""A regional brain's metrics listener: `GET /metrics` (Prometheus, `regional.metrics`) on a
port of its own, `metrics_host`:`metrics_port`, apart from the REST API.

The page names no tenant and no request, but it tells every site's capacity and free amounts,
the links' utilisation, the queue and the reservations, which the REST API shows to staff
only: so it is not on the public REST port, and its listener is bound to loopback unless
`metrics_host` says otherwise (a network only Prometheus reaches). What a scrape reads from
the database (the ledger's snapshot, the queue, the reservations held) is read at most once
per `metrics_max_age_s`, each read within `metrics_read_timeout_s`
(`federation.scrape_reads`): while the database does not answer, `cnbrain_ledger_read` is 0
and what is read from it keeps its last values.
"""

import contextlib
import logging
from collections.abc import AsyncIterator

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from cnbrain.federation.http_server import serving
from cnbrain.federation.scrape_reads import ScrapeReads
from cnbrain.regional.composition import RegionalBrain
from cnbrain.regional.metrics import Metrics
from cnbrain.regional.outages import outage_of

log = logging.getLogger("cnbrain.regional")


def scrape_reads(brain: RegionalBrain, metrics: Metrics) -> ScrapeReads:
    """The reads of a scrape of `brain`'s `metrics`: the ledger's snapshot (the capacity
    series of what it owns), then the queue and the reservations held."""
    live_map = brain.live_map

    async def ledger() -> None:
        snapshot = (await live_map.snapshot())[0]
        metrics.ledger(snapshot, live_map.ownership)

    settings = brain.settings
    return ScrapeReads(
        [ledger, lambda: metrics.read(brain.sessions)],
        max_age_s=settings.metrics_max_age_s,
        timeout_s=settings.metrics_read_timeout_s,
        is_outage=lambda exc: outage_of(exc) == "database",
    )


def create_metrics_app(brain: RegionalBrain, metrics: Metrics) -> Starlette:
    """The listener's app: `GET /metrics` of `brain`'s `metrics` (module docstring)."""
    reads = scrape_reads(brain, metrics)

    async def scrape(request: Request) -> Response:
        metrics.ledger_read.set(1 if await reads.refresh() else 0)
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    app = Starlette(routes=[Route("/metrics", scrape, methods=["GET"])])
    app.state.scrape_reads = reads
    return app


@contextlib.asynccontextmanager
async def metrics_listening(
    brain: RegionalBrain, metrics: Metrics, *, shared: bool = False
) -> AsyncIterator[int | None]:
    """`create_metrics_app` served on `metrics_host`:`metrics_port` of `brain`'s settings
    while the block lasts; yields the port bound (None: no `metrics_port`, no listener).
    With `shared`, the brain's worker processes share the port (`federation.http_server`).
    Raises OSError when the port cannot be bound."""
    settings = brain.settings
    if settings.metrics_port is None:
        yield None
        return
    app = create_metrics_app(brain, metrics)
    async with serving(
        app, host=settings.metrics_host, port=settings.metrics_port, shared=shared
    ) as port:
        log.info("regional brain: metrics on http://%s:%d/metrics", settings.metrics_host, port)
        yield port
