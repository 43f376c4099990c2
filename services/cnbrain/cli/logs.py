"""How a brain process logs: one record a line on standard error, naming the brain, its
region and the request id of the call being handled.

JSON lines (`at`, `level`, `logger`, `message`, `brain`, `region`, `request_id`; `trace_id`
and `span_id` when a span is current, `tenant` when the call has one; and `error` with the
traceback when there is one) when standard error is not a terminal, for log collectors;
plain text in a terminal. The request id is the one current in the call
(`cnbrain.rpc.context`: a REST call's `x-request-id`, a gRPC call's metadata), `-` outside
one. The trace and span ids are those of the current span (`cnbrain.telemetry.spans`, only
with tracing on), so a line leads to its trace; the tenant is that of the caller's key
(`cnbrain.telemetry.tenant`).
"""

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO

from cnbrain.rpc.context import current_request_id
from cnbrain.telemetry.spans import current_span_id, current_trace_id
from cnbrain.telemetry.tenant import current_tenant

TEXT_FORMAT = "%(asctime)s %(levelname)s %(brain)s %(name)s [%(request_id)s] %(message)s"
OPTIONAL_KEYS = ("trace_id", "span_id", "tenant")
"""Keys of a JSON line that are there only when the record has a value for them."""


class _Names(logging.Filter):
    """Adds the brain, its region, the current request id, trace and span ids (or None)
    and tenant (or None) to every record."""

    def __init__(self, brain: str, region: str | None) -> None:
        super().__init__()
        self.brain = brain
        self.region = region or "-"

    def filter(self, record: logging.LogRecord) -> bool:
        record.brain = self.brain
        record.region = self.region
        record.request_id = current_request_id() or "-"
        trace_id = current_trace_id()
        record.trace_id = trace_id
        record.span_id = current_span_id() if trace_id else None
        record.tenant = current_tenant()
        return True


class JsonLines(logging.Formatter):
    """One JSON object a record (module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "brain": getattr(record, "brain", "-"),
            "region": getattr(record, "region", "-"),
            "request_id": getattr(record, "request_id", "-"),
        }
        for key in OPTIONAL_KEYS:
            value = getattr(record, key, None)
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure_logging(
    *, brain: str, region: str | None, level: str, stream: IO[str] | None = None
) -> logging.Handler:
    """Send every record of `level` and above to `stream` (standard error), as JSON lines
    unless it is a terminal; replaces the root logger's handlers. Returns the handler."""
    out = stream if stream is not None else sys.stderr
    handler = logging.StreamHandler(out)
    handler.addFilter(_Names(brain, region))
    handler.setFormatter(logging.Formatter(TEXT_FORMAT) if out.isatty() else JsonLines())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
