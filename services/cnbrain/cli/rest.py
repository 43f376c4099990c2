"""Commands that talk to a running brain over REST, and the command that runs one."""

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from cnbrain.cli import columns
from cnbrain.cli.context import Context, ContextError, read_context
from cnbrain.cli.output import print_json, show

DEFAULT_URL = "http://127.0.0.1:8080"
LOG_LEVEL_VARIABLE = "CNBRAIN_LOG_LEVEL"
"""How `--workers` passes the log level to each worker process."""
REJECTED = 1
"""The exit status of a submission the brain answered but rejected (errors exit 2)."""
TOKEN_FILE = Path("cnbrain-admin.token")


class BrainCallError(Exception):
    """The brain answered with an error; the message is its problem detail."""


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        help="the brain's URL (default: $CNBRAIN_URL, else the context of `cnbrain up`, "
        f"else {DEFAULT_URL})",
    )
    parser.add_argument(
        "--token",
        help="API key (default: $CNBRAIN_TOKEN, else the key file of the context of "
        "`cnbrain up`, else ./cnbrain-admin.token)",
    )


def _context() -> Context | None:
    try:
        return read_context()
    except ContextError as exc:
        raise BrainCallError(str(exc)) from None


def url_of(args: argparse.Namespace) -> str:
    """The brain's URL (`cnbrain.cli.context`: --url, $CNBRAIN_URL, the context, the
    default)."""
    given: str | None = args.url or os.environ.get("CNBRAIN_URL")
    if given:
        return given
    context = _context()
    return context.url if context is not None else DEFAULT_URL


def token_of(args: argparse.Namespace) -> str:
    """The API key (`cnbrain.cli.context`: --token, $CNBRAIN_TOKEN, the context's key file,
    ./cnbrain-admin.token)."""
    token: str | None = args.token or os.environ.get("CNBRAIN_TOKEN")
    if token:
        return token
    context = _context()
    path = context.token_file if context is not None else TOKEN_FILE
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        token = None
    except (OSError, UnicodeDecodeError) as exc:
        raise BrainCallError(f"cannot read the API key in {path}: {exc}") from None
    if not token:
        raise BrainCallError(
            "no API key: pass --token, set CNBRAIN_TOKEN, run `cnbrain up` here, or run "
            "where cnbrain-admin.token is"
        )
    return token


def _client(args: argparse.Namespace) -> httpx.Client:
    token = token_of(args)
    return httpx.Client(
        base_url=url_of(args), headers={"Authorization": f"Bearer {token}"}, timeout=30.0
    )


def call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    """The JSON the brain answers to `method path` (None for an empty answer); raises
    BrainCallError naming the brain it cannot reach, or with the problem detail of an
    error answer."""
    try:
        with _client(args) as client:
            response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        raise BrainCallError(f"cannot reach the brain at {url_of(args)}: {exc}") from None
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise BrainCallError(f"{response.status_code}: {detail}")
    return response.json() if response.content else None


def _print(value: Any) -> int:
    return print_json(value)


def tenant_create(args: argparse.Namespace) -> int:
    return _print(
        call(args, "POST", "/v1/tenants", json={"id": args.id, "name": args.name or args.id})
    )


def tenants_list(args: argparse.Namespace) -> int:
    tenants = call(args, "GET", "/v1/tenants")
    return show(tenants, tenants, columns.TENANTS, args)


def model_count(text: str) -> tuple[str, int]:
    """`MODEL=COUNT` as (model, count), for argparse."""
    model, equals, count = text.partition("=")
    try:
        number = int(count)
    except ValueError:
        number = -1
    if not equals or not model or number < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not MODEL=COUNT (a whole count)")
    return model, number


def _amounts(args: argparse.Namespace, prefix: str) -> dict[str, Any]:
    """The resource amounts the options `--<prefix>-...` name (those given only)."""
    amounts: dict[str, Any] = {
        name: value
        for name, value in (
            ("cpu_cores", getattr(args, f"{prefix}_cpu")),
            ("memory_gib", getattr(args, f"{prefix}_memory_gib")),
            ("storage_gib", getattr(args, f"{prefix}_storage_gib")),
        )
        if value is not None
    }
    accelerators = dict(getattr(args, f"{prefix}_accelerator"))
    if accelerators:
        amounts["accelerators"] = accelerators
    return amounts


def _fair_share_path(tenant: str) -> str:
    return f"/v1/tenants/{quote(tenant, safe='')}/fair-share"


def fair_share_get(args: argparse.Namespace) -> int:
    return _print(call(args, "GET", _fair_share_path(args.tenant)))


def fair_share_put(args: argparse.Namespace) -> int:
    body = {
        "weight": args.weight,
        "cohort": args.cohort,
        "nominal": _amounts(args, "nominal"),
        "borrowing_limit": _amounts(args, "borrow"),
    }
    return _print(call(args, "PUT", _fair_share_path(args.tenant), json=body))


def fair_share_delete(args: argparse.Namespace) -> int:
    call(args, "DELETE", _fair_share_path(args.tenant))
    print(f"deleted the fair share of tenant {args.tenant}")
    return 0


def apikey_create(args: argparse.Namespace) -> int:
    user_id = args.user
    if user_id is None:
        user = call(
            args,
            "POST",
            "/v1/users",
            json={"name": args.name, "role": args.role, "tenant": args.tenant},
        )
        user_id = user["id"]
    return _print(call(args, "POST", f"/v1/users/{quote(user_id, safe='')}/api-keys"))


def apikey_list(args: argparse.Namespace) -> int:
    keys = call(args, "GET", f"/v1/users/{quote(args.user, safe='')}/api-keys")
    return show(keys, keys, columns.KEYS, args)


def apikey_revoke(args: argparse.Namespace) -> int:
    path = f"/v1/users/{quote(args.user, safe='')}/api-keys/{quote(args.key_id, safe='')}"
    return _print(call(args, "DELETE", path))


def user_disable(args: argparse.Namespace) -> int:
    return _print(call(args, "POST", f"/v1/users/{quote(args.user_id, safe='')}/disable"))


def read_body(args: argparse.Namespace) -> Any:
    """The JSON of `args.file` ('-': standard input); BrainCallError naming the file when it
    cannot be read or is not JSON."""
    where = "standard input" if str(args.file) == "-" else str(args.file)
    try:
        text = sys.stdin.read() if str(args.file) == "-" else args.file.read_text(encoding="utf-8")
        return json.loads(text)
    except OSError as exc:
        raise BrainCallError(f"cannot read {where}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BrainCallError(f"{where} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise BrainCallError(
            f"{where} is not JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None


def _decided(answer: Any) -> int:
    """Print a submission's answer; exit status 1 when the brain rejected it (`REJECTED`)."""
    _print(answer)
    return REJECTED if isinstance(answer, dict) and answer.get("state") == "rejected" else 0


def submit(args: argparse.Namespace) -> int:
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}
    return _decided(call(args, "POST", "/v1/requests", json=read_body(args), headers=headers))


def submit_group(args: argparse.Namespace) -> int:
    return _decided(call(args, "POST", "/v1/request-groups", json=read_body(args)))


def requests_list(args: argparse.Namespace) -> int:
    """A page of the requests in the caller's scope; the options given (whatever their
    value: the API bounds them) go as they are."""
    params = {
        k: v
        for k, v in (("state", args.state), ("limit", args.limit), ("cursor", args.cursor))
        if v is not None
    }
    page = call(args, "GET", "/v1/requests", params=params)
    show(page, page["items"], columns.REQUESTS, args)
    if page["next_cursor"] and args.output != "json":
        print(f"(more: --cursor {page['next_cursor']})", file=sys.stderr)
    return 0


def _request_path(request_id: str) -> str:
    """The path of a request, its id escaped whole (a `/`, `..` or `#` in it stays in it)."""
    return f"/v1/requests/{quote(request_id, safe='')}"


def requests_show(args: argparse.Namespace) -> int:
    return _print(call(args, "GET", _request_path(args.id)))


def requests_why(args: argparse.Namespace) -> int:
    """Where a queued request stands (its position, estimated start and what blocks it on
    its top candidates), or why it is not waiting."""
    view = call(args, "GET", _request_path(args.id))
    queue = view.get("queue")
    if view["state"] != "queued":
        print(f"{view['id']} is {view['state']}, not waiting" + _because(view["reason"]))
        staging = [f["end"] for f in view.get("flows", ()) if f["kind"] == "staging"]
        if staging and view["state"] == "placed":
            print(f"  its job starts once its staging ends, at {max(staging)}")
        for flow in view.get("flows", ()):
            print(f"  {flow['kind']} {flow['peer']}: {flow['mbps']} Mbps {_span(flow)}")
        return 0
    if queue is None:
        print(f"{view['id']} is queued; the admission loop has not planned it yet")
        return 0
    start = queue["estimated_start"] or "none within its max wait yet"
    print(f"{view['id']} is queued: position {queue['position']}, estimated start {start}")
    if queue["reason"]:
        print(f"  {queue['reason']}")
    for blocker in queue["blockers"]:
        print(f"  {blocker['text']}")
    return 0


def queue_list(args: argparse.Namespace) -> int:
    """The region's admission queue in order (a tenant's users see their own requests)."""
    params = {"after": args.after, "limit": args.limit}
    page = call(args, "GET", "/v1/queue", params={k: v for k, v in params.items() if v is not None})
    show(page, page["items"], columns.QUEUE, args)
    if page["next_after"] is not None and args.output != "json":
        print(f"(more: --after {page['next_after']})", file=sys.stderr)
    return 0


def routes_between(args: argparse.Namespace) -> int:
    """The best routes between two sites, one line each, then one line per segment."""
    params = {
        "from_site": args.from_site,
        "to_site": args.to_site,
        "routes": args.routes,
        "min_free_gbps": args.min_free_gbps,
    }
    answer = call(args, "GET", "/v1/routes", params=params)
    if args.json:
        return _print(answer)
    if not answer["routes"]:
        print(f"no route from {args.from_site} to {args.to_site} with that free bandwidth")
    for n, route in enumerate(answer["routes"], 1):
        print(f"{n}. {route['latency_ms']:.3f} ms, {_gbps(route['free_gbps'])} free at the least")
        for segment in route["segments"]:
            nodes = segment["nodes"]
            print(
                f"   {segment['kind']:<11} {segment['owner']:<10} {nodes[0]} -> {nodes[-1]}"
                f"  {len(segment['links'])} links, {segment['latency_ms']:.3f} ms,"
                f" {_gbps(segment['free_gbps'])} free"
            )
    return 0


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:g} Gbps"


def _span(flow: dict[str, Any]) -> str:
    return f"from {flow['start']} to {flow['end']}"


def _because(reason: str | None) -> str:
    return f" ({reason})" if reason else ""


def requests_cancel(args: argparse.Namespace) -> int:
    return _print(call(args, "POST", f"{_request_path(args.id)}/cancel"))


def priority_classes_list(args: argparse.Namespace) -> int:
    classes = call(args, "GET", "/v1/priority-classes")
    return show(classes, classes, columns.PRIORITY_CLASSES, args)


def priority_classes_put(args: argparse.Namespace) -> int:
    body = {
        "value": args.value,
        "preemptible": args.preemptible,
        "default_max_wait_s": args.max_wait_s,
        "default": args.default,
    }
    path = f"/v1/priority-classes/{quote(args.name, safe='')}"
    return _print(call(args, "PUT", path, json=body))


def priority_classes_delete(args: argparse.Namespace) -> int:
    call(args, "DELETE", f"/v1/priority-classes/{quote(args.name, safe='')}")
    print(f"deleted priority class {args.name}")
    return 0


def brain_regional(args: argparse.Namespace) -> int:
    import uvicorn

    from cnbrain.cli.federation import grpc_overrides
    from cnbrain.regional.app import create_app
    from cnbrain.regional.settings import Settings

    overrides = {
        key: value
        for key, value in (
            ("database_url", args.database_url),
            ("redis_url", args.redis_url),
            ("map", args.map),
            ("host", args.host),
            ("port", args.port),
            ("metrics_host", args.metrics_host),
            ("metrics_port", args.metrics_port),
            ("region", args.region),
            ("national_endpoint", args.national),
        )
        if value is not None
    }
    overrides.update(grpc_overrides(args))
    settings = Settings(**overrides)
    if args.workers > 1:
        return _brain_workers(settings, overrides, args)
    _log_as_brain(settings, args.log_level)
    _trace_as_brain(settings)
    app = create_app(settings)
    uvicorn.run(
        app, host=settings.host, port=settings.port, log_level=args.log_level, log_config=None
    )
    return 0


def _log_as_brain(settings: Any, level: str) -> None:
    """Log as the regional brain of `settings` (`cnbrain.cli.logs`); uvicorn's own loggers
    go the same way."""
    from cnbrain.cli.logs import configure_logging

    region = settings.region
    configure_logging(brain="regional" if region else "standalone", region=region, level=level)


def _trace_as_brain(settings: Any) -> None:
    """Trace as the regional brain of `settings` when a collector is configured
    (`cnbrain.telemetry.export`); before the app is built, which asks."""
    from cnbrain.telemetry.export import start_tracing

    region = settings.region
    start_tracing(
        brain="regional" if region else "standalone",
        region=region,
        instance=settings.instance_id,
        endpoint=settings.otlp_endpoint,
    )


def worker_app() -> Any:
    """The app of one process of `--workers` (a uvicorn factory): settings and the log level
    (`CNBRAIN_LOG_LEVEL`) from the environment."""
    from cnbrain.regional.app import create_app
    from cnbrain.regional.settings import Settings

    settings = Settings()
    _log_as_brain(settings, os.environ.get(LOG_LEVEL_VARIABLE, "info"))
    _trace_as_brain(settings)
    return create_app(settings, shared_metrics_port=True)


def _brain_workers(settings: Any, overrides: dict[str, Any], args: argparse.Namespace) -> int:
    """`args.workers` processes of one standalone brain on one port: replicas that share its
    database and Redis (each has its own instance id, so they hear each other on the capacity
    bus), and its metrics port (each process answers a scrape with its own metrics). The
    first start (schema, map, first admin, requests left pending) runs once here, before the
    workers start; each worker then builds its app from the environment (`worker_app`)."""
    import asyncio

    import uvicorn

    from cnbrain.regional.app import create_app

    if settings.region is not None:
        raise SystemExit("cnbrain brain regional: --workers is for a standalone brain only")
    if settings.redis_url is None:
        raise SystemExit("cnbrain brain regional: --workers needs Redis (--redis-url) to share")

    async def first_start() -> None:
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            pass

    asyncio.run(first_start())
    for key, value in overrides.items():
        os.environ[f"CNBRAIN_{key.upper()}"] = str(value)
    os.environ[LOG_LEVEL_VARIABLE] = args.log_level
    _log_as_brain(settings, args.log_level)
    uvicorn.run(
        "cnbrain.cli.rest:worker_app",
        factory=True,
        workers=args.workers,
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        log_config=None,
    )
    return 0
