"""The columns of each table the command line prints, one set per kind of item the REST API
answers with (`cnbrain.cli.output`): the main ones, then those `-o wide` adds. Each column
reads the item's JSON as the API sends it."""

from typing import Any, Final

from cnbrain.cli.output import (
    EMPTY,
    Column,
    age,
    duration,
    number,
    percent,
    share_style,
    state_style,
    text,
    until,
)

Item = dict[str, Any]
DEFAULT_CLASS: Final = "(default)"
"""What the class column shows for a request that names no priority class."""


def _get(*path: str) -> Any:
    """A reader of the value at `path` in an item (None where a part is missing)."""

    def read(item: Item) -> Any:
        value: Any = item
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    return read


def _text_of(*path: str) -> Any:
    get = _get(*path)
    return lambda item: text(get(item))


def _class_of(request: Item | None) -> str:
    named = (request or {}).get("priority_class")
    return str(named) if named else DEFAULT_CLASS


REQUESTS: Final[tuple[Column[Item], ...]] = (
    Column("ID", _text_of("id")),
    Column("STATE", _text_of("state"), style=lambda r: state_style(r.get("state"))),
    Column("SITE", _text_of("site")),
    Column("AGE", lambda r: age(r.get("created_at"))),
    Column("TENANT", _text_of("tenant"), wide=True),
    Column("CLASS", lambda r: _class_of(r.get("request")), wide=True),
    Column("POLICY", _text_of("decision", "policy"), wide=True),
    Column(
        "COST CNY",
        lambda r: number(_get("decision", "outcome", "cost_cny")(r), 2),
        wide=True,
        justify="right",
    ),
    Column(
        "LATENCY MS",
        lambda r: number(_get("decision", "path", "latency_ms")(r), 3),
        wide=True,
        justify="right",
    ),
    Column("CREATED", _text_of("created_at"), wide=True),
    Column("UPDATED", _text_of("updated_at"), wide=True),
    Column("REASON", _text_of("reason")),
)
"""A request (`RequestView`): the reason last, as it may be long."""


QUEUE: Final[tuple[Column[Item], ...]] = (
    Column("POSITION", _text_of("position"), justify="right"),
    Column("ID", _text_of("id")),
    Column("TENANT", _text_of("tenant")),
    Column("CLASS", lambda q: str(q.get("priority_class") or DEFAULT_CLASS)),
    Column("WAITING", lambda q: age(q.get("queued_at"))),
    Column("STARTS IN", lambda q: until(q.get("estimated_start"))),
    Column("SITE", _text_of("site")),
    Column("SUBMITTED", _text_of("submitted_at"), wide=True),
    Column("ESTIMATED START", _text_of("estimated_start"), wide=True),
    Column("PLANNED", _text_of("planned_at"), wide=True),
    Column("REASON", _text_of("reason"), wide=True),
)
"""A queued request (`QueueEntry`): `WAITING` since it was queued (`queued_at`: submitted
to wait, or last preempted back into the queue); `STARTS IN` from its estimated start (`-`:
none within its max wait yet)."""


def _detail(event: Item) -> str:
    detail = event.get("detail") or {}
    return "  ".join(f"{name}={value}" for name, value in detail.items()) or EMPTY


EVENT_TIME_WIDTH: Final = 32
EVENT_KIND_WIDTH: Final = 13

EVENTS: Final[tuple[Column[Item], ...]] = (
    Column("AT", _text_of("at"), min_width=EVENT_TIME_WIDTH),
    Column(
        "KIND",
        _text_of("kind"),
        style=lambda e: state_style(e.get("kind")),
        min_width=EVENT_KIND_WIDTH,
    ),
    Column("AGE", lambda e: age(e.get("at")), wide=True, min_width=6),
    Column("DETAIL", _detail),
)
"""A request's event (`RequestEventView`); the widths are fixed so that the rows
`events --follow` prints later line up under the first."""


TENANTS: Final[tuple[Column[Item], ...]] = (
    Column("ID", _text_of("id")),
    Column("NAME", _text_of("name")),
    Column("AGE", lambda t: age(t.get("created_at"))),
    Column("CREATED", _text_of("created_at"), wide=True),
)
"""A tenant (`TenantView`)."""


KEYS: Final[tuple[Column[Item], ...]] = (
    Column("ID", _text_of("id")),
    Column("USER", _text_of("user")),
    Column(
        "STATUS",
        lambda k: "revoked" if k.get("revoked_at") else "active",
        style=lambda k: "dim" if k.get("revoked_at") else "green",
    ),
    Column("AGE", lambda k: age(k.get("created_at"))),
    Column("CREATED", _text_of("created_at"), wide=True),
    Column("REVOKED", _text_of("revoked_at"), wide=True),
)
"""An API key without its secret (`ApiKeyInfo`)."""


def _flags(one: Item) -> str:
    flags = [name for name in ("preemptible", "default") if one.get(name)]
    return ", ".join(flags) or EMPTY


PRIORITY_CLASSES: Final[tuple[Column[Item], ...]] = (
    Column("NAME", _text_of("name")),
    Column("VALUE", _text_of("value"), justify="right"),
    Column("MAX WAIT", lambda c: duration(c.get("default_max_wait_s")), justify="right"),
    Column("FLAGS", _flags),
    Column("MAX WAIT S", _text_of("default_max_wait_s"), wide=True, justify="right"),
)
"""A priority class (`PriorityClassView`), highest value first."""


def _free_of(amount: str) -> Any:
    """`free/capacity` of a site's `amount` (cpu_cores, memory_gib, storage_gib)."""

    def cell(site: Item) -> str:
        free, capacity = site["free"][amount], site["capacity"][amount]
        return f"{free:,.0f}/{capacity:,.0f}"

    return cell


def _accelerators(site: Item) -> str:
    free, capacity = site["free"]["accelerators"], site["capacity"]["accelerators"]
    return (
        ", ".join(f"{model} {free.get(model, 0):g}/{count:g}" for model, count in capacity.items())
        or EMPTY
    )


SITES: Final[tuple[Column[Item], ...]] = (
    Column("SITE", _text_of("id")),
    Column("PROVINCE", _text_of("province")),
    Column("KIND", _text_of("kind")),
    Column("CPU FREE/ALL", _free_of("cpu_cores"), justify="right"),
    Column("MEM GIB FREE/ALL", _free_of("memory_gib"), justify="right"),
    Column("ACCELERATORS FREE/ALL", _accelerators),
    Column(
        "UTIL",
        lambda s: percent(s.get("utilisation")),
        justify="right",
        style=lambda s: share_style(s.get("utilisation")),
    ),
    Column("REGION", _text_of("region"), wide=True),
    Column("STORAGE GIB FREE/ALL", _free_of("storage_gib"), wide=True, justify="right"),
    Column("NAME", _text_of("name"), wide=True),
)
"""A site with its free capacity (`SiteCapacityView`); accelerators by model."""


LINKS: Final[tuple[Column[Item], ...]] = (
    Column("LINK", _text_of("id")),
    Column("A", _text_of("a")),
    Column("B", _text_of("b")),
    Column("LAYER", _text_of("layer")),
    Column("GBPS", lambda link: number(link.get("capacity_gbps"), 0), justify="right"),
    Column("USED GBPS", lambda link: number(link.get("used_gbps"), 1), justify="right"),
    Column(
        "UTIL",
        lambda link: percent(link.get("utilisation")),
        justify="right",
        style=lambda link: share_style(link.get("utilisation")),
    ),
    Column("FREE GBPS", lambda link: number(link.get("free_gbps"), 1), wide=True, justify="right"),
    Column("OWNER", _text_of("owner"), wide=True),
    Column("LATENCY MS", lambda link: number(link.get("latency_ms"), 3), wide=True),
)
"""A link with the bandwidth reserved on it (`LinkUseView`)."""


USAGE: Final[tuple[Column[Item], ...]] = (
    Column("TENANT", _text_of("tenant")),
    Column("SITE", _text_of("site")),
    Column("JOBS", _text_of("records"), justify="right"),
    Column("CPU CORE-H", lambda r: number(r.get("cpu_core_hours"), 2), justify="right"),
    Column("ACCEL-H", lambda r: number(r.get("accelerator_hours"), 2), justify="right"),
    Column("COST CNY", lambda r: number(r.get("cost_cny"), 2), justify="right"),
    Column("SIMULATED", _text_of("simulated"), wide=True),
    Column("ELAPSED", lambda r: duration(r.get("elapsed_s")), wide=True, justify="right"),
    Column("MEM GIB-H", lambda r: number(r.get("memory_gib_hours"), 2), wide=True, justify="right"),
    Column(
        "COMPUTE CNY", lambda r: number(r.get("compute_cost_cny"), 2), wide=True, justify="right"
    ),
    Column(
        "NETWORK CNY", lambda r: number(r.get("network_cost_cny"), 2), wide=True, justify="right"
    ),
)
"""A row of a usage report (`UsageReportRow`): one tenant's jobs on one site (records are
attempts of jobs)."""


CANDIDATES: Final[tuple[Column[Item], ...]] = (
    Column("RANK", _text_of("rank"), justify="right"),
    Column("SITE", _text_of("site")),
    Column("OBJECTIVE", lambda c: number(c.get("objective"), 4), justify="right"),
    Column("SCORE", lambda c: number(c.get("score"), 4), justify="right"),
    Column("VS CHOSEN", _text_of("versus"), wide=True, justify="right"),
)
"""An alternative of a quote (`Candidate`, with its rank and, in `versus`, how far its
objective is from the chosen site's)."""
