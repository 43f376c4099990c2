"""The regional brain's FastAPI application."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi_offline import FastAPIOffline

from cnbrain import __version__
from cnbrain.console.mount import mount_console
from cnbrain.heap import freeze_heap
from cnbrain.regional import openapi, problems
from cnbrain.regional.composition import running
from cnbrain.regional.console_source import RegionalConsole
from cnbrain.regional.limits import BodyLimit, refuse_control_characters
from cnbrain.regional.metrics import HttpMetrics, Metrics
from cnbrain.regional.metrics_listener import metrics_listening
from cnbrain.regional.request_ids import RequestIds
from cnbrain.regional.routers import (
    audit,
    capacity,
    fair_shares,
    health,
    jobs,
    ledger_audit,
    operator,
    priority_classes,
    requests,
    routes,
    tenants,
    usage,
)
from cnbrain.regional.settings import Settings
from cnbrain.regional.tracing import rest_telemetry

DESCRIPTION = """
The regional brain of cnbrain: tenants submit compute requests; the brain decides the site and
the three-segment network path, reserves compute and bandwidth atomically in its database,
and explains the decision. A request with a `job` is then run on the chosen site's cluster
scheduler (Slurm, or a simulator for sites without one) and followed to its end; its usage is
metered from the scheduler's accounting. A request is decided when it arrives: placed, or
rejected when it does not fit now; with `start: "queue"` it waits in the region's admission
queue for the earliest start at which it fits, within its max wait, in the order of its
operator's priority class (`/v1/priority-classes`) and its tenant's fair share. Authenticate
with an API key:
`Authorization: Bearer ck_...`.
Errors are problem details (RFC 9457) that name the field and the reason.
"""


def create_app(settings: Settings | None = None, *, shared_metrics_port: bool = False) -> FastAPI:
    """The brain of `settings` (default: from the environment) as an ASGI app, started by its
    lifespan: the REST API, and the metrics on their own listener when `metrics_port` is set
    (`regional.metrics_listener`; its port bound in `app.state.metrics_port`, None without).
    With `shared_metrics_port`, the processes of one brain's `--workers` share that port."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with (
            running(settings, metrics) as brain,
            metrics_listening(brain, metrics, shared=shared_metrics_port) as metrics_port,
        ):
            app.state.brain = brain
            app.state.metrics_port = metrics_port
            freeze_heap()
            yield

    # The API docs (/docs, /redoc) load their scripts and styles from the brain itself.
    app = FastAPIOffline(
        title="cnbrain regional brain",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        telemetry=rest_telemetry(),  # server spans when tracing is on; else off whole
        dependencies=[Depends(refuse_control_characters)],
    )
    app.state.metrics = metrics = Metrics(
        brain="regional" if settings.region else "standalone", region=settings.region
    )
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(HttpMetrics, metrics=metrics)
    problems.install(app)
    app.add_middleware(RequestIds)  # added last, so outermost: every answer carries it
    for module in (
        health,
        requests,
        jobs,
        usage,
        tenants,
        operator,
        priority_classes,
        audit,
        routes,
        capacity,
    ):
        app.include_router(module.router)
    app.include_router(fair_shares.router)
    app.include_router(ledger_audit.router)
    mount_console(app, RegionalConsole(lambda: app.state.brain))
    openapi.install(app)
    return app
