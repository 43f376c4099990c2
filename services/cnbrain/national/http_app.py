"""The national brain's HTTP app: `GET /metrics` (Prometheus) and `GET /healthz`, served by
`federation.http_server` in the brain's own event loop. It is a FastAPI app built by
`create_http_app`, which holds the running brain in `app.state.brain`: more routes (a web
console, say) are routers that function includes.

Both routes are unauthenticated: they name no tenant and no request, and the listener is
bound to `http_host` (loopback by default). What a scrape reads from the database is read at
most once per `metrics_max_age_s`, each read within `metrics_read_timeout_s`
(`federation.scrape_reads`). The web console (`cnbrain.console`, at `/console/`) shows the
whole country's map from the national brain's view to the federation's API keys.
"""

import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from sqlalchemy.exc import SQLAlchemyError

from cnbrain import __version__
from cnbrain.console.mount import mount_console
from cnbrain.federation.http_server import serving
from cnbrain.federation.scrape_reads import ScrapeReads
from cnbrain.national.composition import NationalBrain
from cnbrain.national.console_source import NationalConsole

log = logging.getLogger("cnbrain.national")

router = APIRouter()


class Health(BaseModel):
    status: str
    instance: str


def _brain(request: Request) -> NationalBrain:
    brain: NationalBrain = request.app.state.brain
    return brain


@router.get("/healthz", response_model=Health, summary="The process is alive")
async def healthz(request: Request) -> Health:
    return Health(status="ok", instance=_brain(request).settings.instance_id)


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """The brain process's Prometheus metrics (`national.metrics`). They answer while the
    database is down (what they read from it then keeps its last values)."""
    reads: ScrapeReads = request.app.state.scrape_reads
    await reads.refresh()
    return Response(_brain(request).metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


def _database_down(exc: BaseException) -> bool:
    return isinstance(exc, SQLAlchemyError | OSError)


def create_http_app(brain: NationalBrain) -> FastAPI:
    """The national brain's HTTP app, over the running `brain` (module docstring)."""
    app = FastAPIOffline(
        title="cnbrain national brain",
        version=__version__,
        # FastAPI's automatic OpenTelemetry would ask the environment on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.brain = brain
    settings = brain.settings
    app.state.scrape_reads = ScrapeReads(
        [lambda: brain.metrics.read(brain.sessions)],
        max_age_s=settings.metrics_max_age_s,
        timeout_s=settings.metrics_read_timeout_s,
        is_outage=_database_down,
    )
    app.include_router(router)
    mount_console(app, NationalConsole(brain))
    return app


@contextlib.asynccontextmanager
async def listening(brain: NationalBrain) -> AsyncIterator[int | None]:
    """`create_http_app(brain)` served on its settings' `http_host`:`http_port` while the
    block lasts; yields the port bound (None: no `http_port` set, nothing served). Raises
    OSError when the port cannot be bound."""
    settings = brain.settings
    if settings.http_port is None:
        yield None
        return
    app = create_http_app(brain)
    async with serving(app, host=settings.http_host, port=settings.http_port) as port:
        log.info("national brain: HTTP on %s:%d", settings.http_host, port)
        yield port
