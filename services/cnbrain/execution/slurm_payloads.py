"""The JSON of slurmrestd's OpenAPI plugins v0.0.38 and dbv0.0.38, to and from our models.

Pure functions, no I/O: `SlurmBackend` sends what `submit_body` builds and reads what comes
back with `status_from_job` (the controller's `/slurm/v0.0.38/job/{id}`), `status_from_db` and
`accounting_from_db` (the accounting's `/slurmdb/v0.0.38/job/{id}`).

How a job is tagged: its Slurm name is `<request id>/<name>` and its comment
`cnbrain request=<request id>`; while the adapter holds it stopped, the comment also carries
`stopped-at=<POSIX seconds>` (see `SlurmBackend.suspend`). The batch environment gets
CNBRAIN_REQUEST_ID.
"""

import itertools
import math
import re
from collections.abc import Mapping
from typing import Any

from cnbrain.domain.accelerators import MILLI
from cnbrain.execution.jobs import (
    JobAccounting,
    JobSpec,
    JobState,
    JobStatus,
    NodeReport,
    utc_from_epoch,
)

Json = dict[str, Any]

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
"""PATH of a job whose environment does not set one."""

_TAG = "cnbrain request="
_STOPPED_AT = re.compile(r"\s+stopped-at=(\d+(?:\.\d+)?)$")

_STATES: dict[str, JobState] = {
    # The controller's words (job_state_string), flags first, then base states.
    "PENDING": JobState.PENDING,
    "CONFIGURING": JobState.PENDING,
    "REQUEUED": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "SPECIAL_EXIT": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "UPDATE_DB": JobState.RUNNING,
    "POWER_UP_NODE": JobState.PENDING,
    "STOPPED": JobState.SUSPENDED,
    "SUSPENDED": JobState.SUSPENDED,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "NODE_FAIL": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    "DEADLINE": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
    "PREEMPTED": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT,
}


def state_of(slurm_state: str) -> JobState:
    """Our state for a Slurm job state word.

    A word this table does not know is taken as RUNNING: live, so a watcher keeps asking
    rather than taking an unknown word for an end; `backend_state` keeps the word itself.
    """
    return _STATES.get(slurm_state.upper(), JobState.RUNNING)


def decode_wait_status(raw: int | None) -> tuple[int | None, int | None]:
    """(exit code, signal) of a wait(2) status as the controller reports it (exit 3 is 768)."""
    if raw is None or raw < 0:
        return None, None
    signal = raw & 0x7F
    if signal:
        return None, signal
    return (raw >> 8) & 0xFF, None


def slurm_job_name(job: JobSpec) -> str:
    return f"{job.request_id}/{job.name}"


def request_id_of(name: str | None, comment: str | None = None) -> str | None:
    """The request id a job was tagged with: from its comment, else from its name."""
    if comment and comment.startswith(_TAG):
        tagged = comment[len(_TAG) :].split()
        if tagged:
            return tagged[0]
    if name and "/" in name:
        return name.split("/", 1)[0] or None
    return None


def request_comment(request_id: str, *, stopped_at: float | None = None) -> str:
    """The comment of a job of `request_id`, marked with `stopped_at` while held stopped."""
    comment = _TAG + request_id
    return comment if stopped_at is None else f"{comment} stopped-at={stopped_at:.0f}"


def stopped_at_of(comment: str | None) -> float | None:
    """When the adapter stopped the job, from its comment; None if it did not."""
    match = _STOPPED_AT.search(comment or "")
    return float(match.group(1)) if match else None


def time_limit_minutes(seconds: float) -> int:
    """Slurm's time limits count whole minutes: `seconds` rounded up, at least 1."""
    return max(1, math.ceil(seconds / 60))


def submit_body(
    job: JobSpec,
    *,
    partition: str | None = None,
    account: str | None = None,
    gpu_types: Mapping[str, str] | None = None,
    gpu_shards: int | None = None,
) -> Json:
    """The body of `POST /slurm/v0.0.38/job/submit` for `job`.

    `nodes` nodes with one task each of `cpus` CPUs, `memory_mib` per node, the time limit in
    minutes (rounded up), and `gres=gpu[:type]:N` per node when GPUs are asked for;
    `gpu_types` maps the site's accelerator model names to the GRES type names of its
    gres.conf (a model it does not map is passed as it is). A fraction of one GPU
    (`gpu_milli`) asks `gres=shard:K`, its share of the `gpu_shards` shards of a GPU rounded
    up, when the site shards its GPUs; otherwise a whole GPU.
    """
    script = job.command if job.command.startswith("#!") else f"#!/bin/sh\n{job.command}\n"
    environment = {"PATH": DEFAULT_PATH, **job.environment, "CNBRAIN_REQUEST_ID": job.request_id}
    properties: Json = {
        "name": slurm_job_name(job),
        "comment": request_comment(job.request_id),
        "nodes": job.nodes,
        "tasks": job.nodes,
        "tasks_per_node": 1,
        "cpus_per_task": job.cpus,
        "memory_per_node": job.memory_mib,
        "time_limit": time_limit_minutes(job.time_limit_s),
        "environment": environment,
        "current_working_directory": job.working_directory,
    }
    if job.output_path is not None:
        properties["standard_output"] = job.output_path
        properties["standard_error"] = job.output_path
    if job.gpu_milli is not None and gpu_shards is not None:
        properties["gres"] = f"shard:{math.ceil(job.gpu_milli * gpu_shards / MILLI)}"
    elif job.gpus:
        if job.gpu_type is None:
            properties["gres"] = f"gpu:{job.gpus}"
        else:
            gres_type = (gpu_types or {}).get(job.gpu_type, job.gpu_type)
            properties["gres"] = f"gpu:{gres_type}:{job.gpus}"
    if partition is not None:
        properties["partition"] = partition
    if account is not None:
        properties["account"] = account
    return {"script": script, "job": properties}


def status_from_job(record: Json) -> JobStatus:
    """A JobStatus from one job of the controller's `GET /slurm/v0.0.38/job/{id}`."""
    job_id = str(record["job_id"])
    word = str(record.get("job_state") or "UNKNOWN")
    state = state_of(word)
    reason = _reason(record.get("state_reason"))
    exit_code, signal = (
        decode_wait_status(_int(record.get("exit_code"))) if state.is_final else (None, None)
    )
    return JobStatus(
        job_id=job_id,
        request_id=request_id_of(record.get("name"), record.get("comment")),
        state=state,
        backend_state=word,
        reason=reason,
        exit_code=exit_code,
        signal=signal,
        submitted_at=utc_from_epoch(_int(record.get("submit_time"))),
        # A pending job's start_time is the controller's forecast, not a start; a job
        # cancelled while pending gets start_time = end_time but never had a node.
        started_at=utc_from_epoch(_int(record.get("start_time")))
        if state is not JobState.PENDING and record.get("nodes")
        else None,
        ended_at=utc_from_epoch(_int(record.get("end_time"))) if state.is_final else None,
        message=_message(job_id, word, reason, exit_code, signal),
    )


def status_from_db(record: Json) -> JobStatus:
    """A JobStatus from one job of the accounting's `GET /slurmdb/v0.0.38/job/{id}`, for a
    job the controller no longer remembers. Its exit code is unreliable (`db_exit`)."""
    job_id = str(record["job_id"])
    word = str((record.get("state") or {}).get("current") or "UNKNOWN")
    state = state_of(word)
    times = record.get("time") or {}
    reason = _reason((record.get("state") or {}).get("reason"))
    exit_code, signal = db_exit(record, state) if state.is_final else (None, None)
    return JobStatus(
        job_id=job_id,
        request_id=request_id_of(record.get("name")),
        state=state,
        backend_state=word,
        reason=reason,
        exit_code=exit_code,
        signal=signal,
        submitted_at=utc_from_epoch(_int(times.get("submission"))),
        started_at=utc_from_epoch(_int(times.get("start"))) if _ran(record, state) else None,
        ended_at=utc_from_epoch(_int(times.get("end"))) if state.is_final else None,
        message=_message(job_id, word, reason, exit_code, signal) + " (from accounting)",
    )


def _ran(record: Json, state: JobState) -> bool:
    """Whether an accounting record is of a job that got a node (and so really started)."""
    if state is JobState.PENDING:
        return False
    return bool(_int(record.get("allocation_nodes")))


def db_exit(record: Json, state: JobState) -> tuple[int | None, int | None]:
    """(exit code, signal) as far as dbv0.0.38 can tell them.

    Its dumper reports every normal exit as {"status": "SUCCESS", "return_code": 0}, whatever
    the code (it tests WIFEXITED only), so a return code is believed only for a completed job
    (0); a signal it reports is believed; a failed job's code stays None.
    """
    exit_field = record.get("exit_code") or {}
    if exit_field.get("status") == "SIGNALED":
        signal = _int((exit_field.get("signal") or {}).get("signal_id"))
        return None, signal
    if state is JobState.COMPLETED:
        return 0, None
    return None, None


def accounting_from_db(record: Json, *, controller: JobStatus | None = None) -> JobAccounting:
    """A JobAccounting from one job of `GET /slurmdb/v0.0.38/job/{id}`.

    `controller` is the job's status from the controller when it still has it: its request id
    (from the comment) is preferred to the one in the accounting's job name, which the
    accounting may briefly show as another word, and its exit code and signal replace the
    accounting's (see `db_exit`). A job that never got a node has no `started_at`.
    """
    status = status_from_db(record)
    times = record.get("time") or {}
    tres = _tres(((record.get("tres") or {}).get("allocated")) or [])
    exit_code, signal = status.exit_code, status.signal
    request_id = status.request_id
    if controller is not None:
        request_id = controller.request_id or request_id
        if controller.state.is_final:
            exit_code, signal = controller.exit_code, controller.signal
    return JobAccounting(
        job_id=status.job_id,
        request_id=request_id,
        state=status.state,
        backend_state=status.backend_state,
        submitted_at=status.submitted_at,
        started_at=status.started_at,
        ended_at=status.ended_at,
        elapsed_s=float(_int(times.get("elapsed")) or 0),
        nodes=tres.get("node", 0),
        suspended_s=float(_int(times.get("suspended")) or 0),
        cpus=tres.get("cpu", 0),
        memory_mib=tres.get("mem", 0),
        gpus=tres.get("gres/gpu", 0),
        tres=tres,
        cpu_time_s=_cpu_time(record),
        exit_code=exit_code,
        signal=signal,
        source="Slurm accounting (slurmdbd, via slurmrestd dbv0.0.38)",
    )


def nodes_from(body: Json) -> list[NodeReport]:
    """The nodes of the controller's `GET /slurm/v0.0.38/nodes` (entries without a name
    dropped), with their GPUs from `gres` and `gres_used`."""
    nodes = []
    for record in body.get("nodes") or []:
        if not isinstance(record, dict) or not record.get("name"):
            continue
        nodes.append(
            NodeReport(
                name=str(record["name"]),
                state=str(record.get("state") or "unknown"),
                state_flags=_flags(record.get("state_flags")),
                cpus=max(0, _int(record.get("cpus")) or 0),
                cpus_allocated=max(0, _int(record.get("alloc_cpus")) or 0),
                memory_mib=max(0, _int(record.get("real_memory")) or 0),
                memory_allocated_mib=max(0, _int(record.get("alloc_memory")) or 0),
                gpus=gpu_counts(record.get("gres")),
                gpus_used=gpu_counts(record.get("gres_used")),
                gpus_shared=shared_gpus(record.get("gres_used")),
            )
        )
    return nodes


MAX_SHARDS = 10**6
"""Shard counts above this in a job's GRES detail are taken as this."""

MAX_JOB_NODES = 4096
"""Nodes of one job read for its shards, at most."""


def shards_in_use(body: Json) -> dict[str, dict[int, int]]:
    """Shards in use on each GPU of each node, by node name and GPU index, from the
    controller's `GET /slurm/v0.0.38/jobs`: the jobs that hold their resources (running or
    suspended), each node of `job_resources.allocated_nodes` with its entry of
    `gres_detail` ("shard:25(IDX:0)", "shard:fake:25(IDX:0)"), in that order. A job whose
    shards span several GPUs of a node ("shard:150(IDX:0-1)") does not say how they split:
    each of those GPUs counts them all, so none looks freer than it is."""
    used: dict[str, dict[int, int]] = {}
    for record in body.get("jobs") or []:
        if not isinstance(record, dict):
            continue
        if state_of(str(record.get("job_state") or "")) not in (
            JobState.RUNNING,
            JobState.SUSPENDED,
        ):
            continue
        resources = record.get("job_resources")
        allocated = resources.get("allocated_nodes") if isinstance(resources, dict) else None
        details = record.get("gres_detail")
        if not isinstance(allocated, list) or not isinstance(details, list):
            continue
        if len(allocated) != len(details):
            continue  # no entry per node (a job that holds no GRES): nothing to map
        for node, detail in itertools.islice(zip(allocated, details, strict=True), MAX_JOB_NODES):
            name = node.get("nodename") if isinstance(node, dict) else None
            if not isinstance(name, str) or not name:
                continue
            for entry in _GRES.finditer(str(detail)):
                if entry["name"] != "shard":
                    continue
                digits = entry["count"]
                count = MAX_SHARDS if len(digits) > 7 else min(int(digits), MAX_SHARDS)
                on_node = used.setdefault(name, {})
                for index in _indices(entry["detail"] or ""):
                    on_node[index] = on_node.get(index, 0) + count
    return used


MAX_STATE_FLAGS = 32
"""State flags of a node kept, at most (Slurm has fewer than this)."""


def _flags(flags: Any) -> tuple[str, ...]:
    """A node's state flags: the first `MAX_STATE_FLAGS` strings of 1 to 64 characters
    (anything else dropped)."""
    if not isinstance(flags, list):
        return ()
    kept = (flag for flag in flags if isinstance(flag, str) and 0 < len(flag) <= 64)
    return tuple(itertools.islice(kept, MAX_STATE_FLAGS))


def gpu_counts(gres: Any) -> dict[str, int]:
    """GPUs by type in a GRES list as Slurm prints it ("gpu:a100:4,gpu:t4:2(S:0)",
    "gpu:fake:0(IDX:N/A)", "gpu:2"); other resources are left out."""
    counts: dict[str, int] = {}
    for entry in str(gres or "").split(","):
        fields = entry.split("(", 1)[0].split(":")
        if fields[0] != "gpu" or len(fields) < 2:
            continue
        kind, count = (fields[1], fields[2]) if len(fields) >= 3 else ("", fields[1])
        number = _int(count)
        if number is not None and number >= 0:
            counts[kind] = counts.get(kind, 0) + number
    return counts


_GRES = re.compile(
    r"(?P<name>[A-Za-z_]+)(?::(?P<kind>[^:,()]+))?:(?P<count>\d+)(?:\((?P<detail>[^)]*)\))?"
)
"""One entry of a GRES list: name, type, count and what Slurm adds in parentheses."""

MAX_GPU_INDEX = 1024
"""GPU indices of a node at or above this are left out."""


def shared_gpus(gres_used: Any) -> dict[str, int]:
    """GPUs by type that shards are in use on and that no job holds whole, from a node's
    `gres_used` ("gpu:fake:1(IDX:0),shard:fake:1(IDX:0-2)": two of type fake). Slurm gives a
    GPU with shards in use to no job that asks for whole GPUs."""
    whole: dict[str, set[int]] = {}
    shards: dict[str, set[int]] = {}
    for entry in _GRES.finditer(str(gres_used or "")):
        held = {"gpu": whole, "shard": shards}.get(entry["name"])
        if held is not None:
            held.setdefault(entry["kind"] or "", set()).update(_indices(entry["detail"] or ""))
    counts = {kind: len(used - whole.get(kind, set())) for kind, used in shards.items()}
    return {kind: n for kind, n in counts.items() if n}


def _indices(detail: str) -> set[int]:
    """The device indices of an entry's detail ("IDX:0,2-3"; "IDX:N/A" and others: none)."""
    if not detail.startswith("IDX:"):
        return set()
    found: set[int] = set()
    for part in detail[4:].split(","):
        if len(found) == MAX_GPU_INDEX:
            break
        first, _, last = part.partition("-")
        low, high = _int(first), _int(last or first)
        if low is not None and high is not None and 0 <= low <= high:
            found.update(range(low, min(high, MAX_GPU_INDEX - 1) + 1))
    return found


def errors_of(body: Json) -> list[Json]:
    """The `errors` list of a slurmrestd answer (entries that are not dicts dropped)."""
    errors = body.get("errors") or []
    return [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []


def error_number(error: Json) -> int | None:
    """An error's number: v0.0.38 says `error_code` on submit, `error_number` elsewhere."""
    return _int(error.get("error_number", error.get("error_code")))


def describe_errors(errors: list[Json]) -> str:
    """The errors as one line: "error: description (number)" joined by "; "."""
    parts = []
    for error in errors:
        words = [str(error[k]) for k in ("error", "description") if error.get(k)]
        number = error_number(error)
        parts.append(": ".join(dict.fromkeys(words)) + (f" ({number})" if number else ""))
    return "; ".join(parts) or "no reason given"


def _tres(entries: list[Any]) -> dict[str, int]:
    tres: dict[str, int] = {}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("count") is None:
            continue
        key = str(entry.get("type"))
        if entry.get("name"):
            key = f"{key}/{entry['name']}"
        tres[key] = tres.get(key, 0) + int(entry["count"])
    return tres


def _cpu_time(record: Json) -> float:
    """CPU time of the job: the sum over its steps (Slurm's TotalCPU), else the job's own."""

    def seconds(times: Any) -> float:
        total = (times or {}).get("total") or {}
        return (_int(total.get("seconds")) or 0) + (_int(total.get("microseconds")) or 0) / 1e6

    steps = [s for s in record.get("steps") or [] if isinstance(s, dict)]
    if steps:
        return sum(seconds(step.get("time")) for step in steps)
    return seconds(record.get("time"))


def _message(job_id: str, word: str, reason: str, exit_code: int | None, signal: int | None) -> str:
    parts = [f"Slurm job {job_id} {word}"]
    if reason:
        parts.append(f"reason {reason}")
    if exit_code is not None:
        parts.append(f"exit code {exit_code}")
    if signal is not None:
        parts.append(f"signal {signal}")
    return ", ".join(parts)


def _reason(value: Any) -> str:
    text = str(value or "")
    return "" if text == "None" else text


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) <= MAX_DIGITS:
        return int(value)
    return None


MAX_DIGITS = 20
"""A number Slurm prints with more characters than this is taken as none."""
