"""Trace files: JSON Lines or CSV, one `TraceJob` per line (format in docs/simulator.md).

- JSON Lines (`.jsonl`): each non-blank line is one JSON object whose keys are `TraceJob` field
  names; a field left out takes its default; `null` is allowed for the nullable fields
  (`accelerator_model`, `accelerator_milli`, `max_latency_ms`).
- CSV (`.csv`): the first line is a header of `TraceJob` field names, in any order, each at most
  once; every required field (`id`, `arrival_s`, `duration_s`, `source_province`, `cpu`,
  `memory_gib`) must have a column. An empty cell means the field is absent: null for the
  nullable fields, the default for the others, an error for a required one. Blank lines are
  skipped.

On top of `TraceJob`'s own checks, a reader rejects non-finite numbers, an accelerator model
outside the catalog, a positive `accelerator_count` without `accelerator_model`, and an id
already used on an earlier line. The first problem raises `TraceError`, which names the file,
the line (1-based, the CSV header is line 1) and the field.
"""

import csv
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from cnbrain.domain.accelerators import ACCELERATOR_MODELS
from cnbrain.domain.errors import Invalid
from cnbrain.simulate.trace import TraceJob

TRACE_SUFFIXES: Final = (".jsonl", ".csv")
FIELDS: Final[tuple[str, ...]] = tuple(TraceJob.model_fields)
JSON_COLUMN: Final = "flows"
"""The CSV column that holds a JSON object (`Flows`); an empty cell is no flows."""
REQUIRED_FIELDS: Final[tuple[str, ...]] = tuple(
    name for name, info in TraceJob.model_fields.items() if info.is_required()
)


class TraceError(Invalid):
    """A trace file is wrong. `line` and `field` are None when the fault is the whole file."""

    def __init__(self, path: Path, line: int | None, field: str | None, message: str) -> None:
        where = str(path) + (f": line {line}" if line is not None else "")
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")
        self.path = path
        self.line = line
        self.field = field
        self.message = message


def read_trace(path: Path) -> list[TraceJob]:
    """The jobs of the trace at `path` (`.jsonl` or `.csv`), sorted by arrival time, then id.

    Raises TraceError on the first bad line, on an unknown suffix, or when the file cannot be
    read.
    """
    suffix = _suffix(path)
    try:
        with path.open(encoding="utf-8-sig", newline="") as stream:
            lines = (
                _jsonl_records(path, stream) if suffix == ".jsonl" else _csv_records(path, stream)
            )
            jobs = _validate(path, lines)
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(path, None, None, f"cannot read the trace ({exc})") from None
    return sort_jobs(jobs)


def write_trace(jobs: Iterable[TraceJob], path: Path) -> int:
    """Write `jobs` to `path` in the format its suffix names, sorted by arrival then id; create
    missing parent directories; return the number of jobs written. What it writes, `read_trace`
    reads back equal."""
    suffix = _suffix(path)
    ordered = sort_jobs(jobs)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as stream:
        if suffix == ".jsonl":
            for job in ordered:
                record = job.model_dump(mode="json")
                stream.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")
        else:
            writer = csv.writer(stream, lineterminator="\n")
            writer.writerow(FIELDS)
            for job in ordered:
                record = job.model_dump(mode="json")
                writer.writerow([_cell(record[f]) for f in FIELDS])
    return len(ordered)


def sort_jobs(jobs: Iterable[TraceJob]) -> list[TraceJob]:
    """`jobs` in trace order: by arrival time, then by id."""
    return sorted(jobs, key=lambda job: (job.arrival_s, job.id))


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in TRACE_SUFFIXES:
        raise TraceError(
            path, None, None, f"unknown trace format {suffix or '(none)'!r}; use .jsonl or .csv"
        )
    return suffix


def _jsonl_records(path: Path, stream: Iterable[str]) -> Iterator[tuple[int, Any]]:
    for number, text in enumerate(stream, start=1):
        if not text.strip():
            continue
        try:
            yield number, json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(path, number, None, f"not valid JSON ({exc.msg})") from None


def _csv_records(path: Path, stream: Iterable[str]) -> Iterator[tuple[int, Any]]:
    reader = csv.reader(stream)
    header = next(reader, None)
    if header is None:
        raise TraceError(path, 1, None, "the file is empty; a CSV trace needs a header line")
    _check_header(path, header)
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise TraceError(
                path, reader.line_num, None, f"{len(row)} cells, the header has {len(header)}"
            )
        record = {name: cell for name, cell in zip(header, row, strict=True) if cell}
        if JSON_COLUMN in record:
            try:
                record[JSON_COLUMN] = json.loads(record[JSON_COLUMN])
            except json.JSONDecodeError as exc:
                raise TraceError(
                    path, reader.line_num, JSON_COLUMN, f"not valid JSON ({exc.msg})"
                ) from None
        yield reader.line_num, record


def _cell(value: object) -> object:
    """A CSV cell: empty for None, JSON for the flows, the value itself otherwise."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    return value


def _check_header(path: Path, header: list[str]) -> None:
    seen: set[str] = set()
    for name in header:
        if name not in FIELDS:
            raise TraceError(path, 1, name, f"unknown column; columns are {', '.join(FIELDS)}")
        if name in seen:
            raise TraceError(path, 1, name, "the column appears more than once")
        seen.add(name)
    for name in REQUIRED_FIELDS:
        if name not in seen:
            raise TraceError(path, 1, name, "required column is missing")


def _validate(path: Path, records: Iterable[tuple[int, Any]]) -> list[TraceJob]:
    jobs: list[TraceJob] = []
    first_line: dict[str, int] = {}
    for number, record in records:
        if not isinstance(record, Mapping):
            raise TraceError(path, number, None, "a trace line must be a JSON object")
        try:
            job = TraceJob.model_validate(record)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"]) or None
            raise TraceError(path, number, field, error["msg"]) from None
        problem = job_problem(job)
        if problem is not None:
            raise TraceError(path, number, *problem)
        if job.id in first_line:
            raise TraceError(
                path, number, "id", f"{job.id!r} is already the id of line {first_line[job.id]}"
            )
        first_line[job.id] = number
        jobs.append(job)
    return jobs


def job_problem(job: TraceJob) -> tuple[str, str] | None:
    """(field, message) of the first problem `TraceJob` itself lets through, or None."""
    for name in FIELDS:
        value = getattr(job, name)
        if isinstance(value, float) and not math.isfinite(value):
            return name, f"must be a finite number, not {value}"
    if job.accelerator_model is not None and job.accelerator_model not in ACCELERATOR_MODELS:
        return (
            "accelerator_model",
            f"unknown model {job.accelerator_model!r}; known: {', '.join(ACCELERATOR_MODELS)}",
        )
    if job.accelerator_count > 0 and job.accelerator_model is None:
        return "accelerator_model", "required when accelerator_count is positive"
    return None
