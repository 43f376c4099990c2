"""Serving the console on a brain's FastAPI app: `/` and `/console` lead to `/console/`, the
page; `/console/static/...` are its scripts and styles (no key needed: they hold no data);
`/console/api/info` and `/console/api/map` are the JSON it reads besides the brain's REST API,
each needing an API key as a bearer token (401 without a valid one)."""

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Protocol

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Response
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles

from cnbrain.console.map_view import without_load
from cnbrain.console.views import Brain, ConsoleInfo, MapView, Page, Viewer

STATIC = Path(__file__).parent / "static"
PREFIX = "/console"

PAGE_HEADERS = {
    # Everything the page loads comes from the brain itself.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
API_HEADERS = {"Cache-Control": "no-store"}


class ConsoleSource(Protocol):
    """What one brain shows in its console."""

    @property
    def brain(self) -> Brain:
        """Which kind of brain serves the console."""

    @property
    def pages(self) -> Sequence[Page]:
        """The pages it has, in the order of the console's menu."""

    def region(self) -> str | None:
        """The region the brain owns (None: the whole map, or the national brain)."""

    def map_name(self) -> str:
        """The name of the brain's map."""

    async def viewer(self, token: str) -> Viewer | None:
        """Who API key `token` is; None for no valid key."""

    async def map_view(self) -> MapView:
        """The map with every load the brain knows; the console strips the load for viewers
        who may not see it."""


def mount_console(app: FastAPI, source: ConsoleSource) -> None:
    """Serve the console of `source` on `app` (see the module docstring)."""
    bearer = HTTPBearer(auto_error=False)

    async def viewer(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> Viewer:
        if credentials is not None:
            found = await source.viewer(credentials.credentials)
            if found is not None:
                return found
        raise HTTPException(
            401,
            "send an API key as `Authorization: Bearer <key>`",
            headers={"WWW-Authenticate": "Bearer"},
        )

    router = APIRouter(include_in_schema=False)

    @router.get("/")
    @router.get(PREFIX)
    async def to_console() -> RedirectResponse:
        return RedirectResponse(f"{PREFIX}/", status_code=307)

    @router.get(f"{PREFIX}/")
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers=PAGE_HEADERS)

    @router.get(f"{PREFIX}/api/info", response_model=ConsoleInfo)
    async def info(who: Annotated[Viewer, Depends(viewer)], response: Response) -> ConsoleInfo:
        response.headers.update(API_HEADERS)
        return ConsoleInfo(
            brain=source.brain,
            region=source.region(),
            map=source.map_name(),
            viewer=who,
            pages=list(source.pages),
        )

    @router.get(f"{PREFIX}/api/map", response_model=MapView)
    async def map_view(who: Annotated[Viewer, Depends(viewer)], response: Response) -> MapView:
        response.headers.update(API_HEADERS)
        view = await source.map_view()
        return view if who.staff else without_load(view)

    app.include_router(router)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=STATIC), name="console-static")
