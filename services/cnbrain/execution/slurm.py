"""`SlurmBackend`: a site's Slurm, through slurmrestd's REST API (OpenAPI plugin v0.0.38).

Authentication is slurmrestd's JWT mode: every request carries `X-SLURM-USER-NAME` and
`X-SLURM-USER-TOKEN`; jobs run as that user. The token comes from a `TokenSource` (the brain's
credential store) at each request, so a renewed token is picked up without a restart.

Endpoints used:
  POST   /slurm/v0.0.38/job/submit                  submit
  GET    /slurm/v0.0.38/job/{id}                     status (then accounting, once purged)
  DELETE /slurm/v0.0.38/job/{id}?signal=STOP|CONT    suspend, resume
  POST   /slurm/v0.0.38/job/{id}                     comment marker; time limit on resume
  DELETE /slurm/v0.0.38/job/{id}                     cancel (SIGKILL)
  GET    /slurmdb/v0.0.38/job/{id}                   accounting
  GET    /slurm/v0.0.38/ping                         ping

Suspend and resume: v0.0.38 has no suspend operation (Slurm's own suspend RPC, `scontrol
suspend`, is not exposed). The adapter signals the whole job instead (the REST cancel with
`signal=STOP`, which slurmrestd sends with KILL_FULL_JOB: the batch script and every step and
child process), and Slurm then reports the job as STOPPED, which `status` reports as
suspended; `signal=CONT` lets it run on. Unlike Slurm's suspend, the job's time limit keeps
counting while it is stopped, so `suspend` records the time in the job's comment and `resume`
lengthens the time limit by the stopped minutes (raising a limit needs Slurm's Operator
level for the REST user). Both return once Slurm reports the signal delivered (the job is
SIGNALING meanwhile), waiting at most `SETTLE_S`. See docs/execution.md.

Every HTTP call has a timeout, and its answer is read up to `max_response_bytes`; a failed
connection, a timeout, a larger answer, an HTTP 5xx without slurmrestd's JSON, a refused
credential or one of Slurm's communication errors raises `BackendUnavailable`.
"""

import asyncio
import json as jsonlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx

from cnbrain.closing import Closing
from cnbrain.execution.credentials import TokenSource
from cnbrain.execution.errors import BackendRejected, BackendUnavailable, UnknownJob
from cnbrain.execution.jobs import JobAccounting, JobSpec, JobState, JobStatus, NodeReport
from cnbrain.execution.slurm_payloads import (
    Json,
    accounting_from_db,
    describe_errors,
    error_number,
    errors_of,
    nodes_from,
    request_comment,
    shards_in_use,
    status_from_db,
    status_from_job,
    stopped_at_of,
    submit_body,
)
from cnbrain.execution.watching import watch_by_polling

API = "v0.0.38"
_JOB = f"/slurm/{API}/job"
_DB_JOB = f"/slurmdb/{API}/job"

SETTLE_S = 5.0
"""How long suspend and resume wait for Slurm to report the signal delivered."""

MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""The most of one slurmrestd answer read by default: the job or node list of a cluster of
tens of thousands of jobs and nodes fits in it many times over."""

_INVALID_JOB_ID = 2017  # ESLURM_INVALID_JOB_ID
_NOTHING_FOUND = 9003  # ESLURM_REST_EMPTY_RESULT


def _is_communication_error(number: int | None) -> bool:
    """Slurm's errors that mean "could not talk to the controller or the database"."""
    if number is None:
        return False
    return (
        number == -1  # what slurmrestd reports when the controller refused the token
        or 1000 <= number < 1100  # SLURM_COMMUNICATIONS_* and protocol errors
        or 1800 <= number < 1900  # SLURMCTLD_COMMUNICATIONS_*
        or 5000 <= number < 5100  # SLURM_PROTOCOL_SOCKET_*
        or number in (7000, 7001)  # ESLURM_DB_CONNECTION*
    )


class SlurmBackend(Closing):
    """A `ClusterBackend` over slurmrestd (JWT auth, OpenAPI v0.0.38).

    Keyword-only configuration: `url` of slurmrestd, `user` the Slurm user jobs run as,
    `token` a source of its JWT, `timeout_s` the limit of each HTTP call, `partition` and
    `account` for submitted jobs (the cluster's defaults when None), `gpu_types` the map of
    accelerator model names to the site's GRES type names, `gpu_shards` the shards of each
    GPU in its gres.conf (None: a fraction of a GPU gets a whole one), `max_response_bytes`
    the most of an answer read. `transport` replaces httpx's network transport (for a proxy
    or a Unix socket).
    Use as an async context manager, or call `aclose()` when done.
    """

    def __init__(
        self,
        *,
        url: str,
        user: str,
        token: TokenSource,
        timeout_s: float = 10.0,
        partition: str | None = None,
        account: str | None = None,
        gpu_types: Mapping[str, str] | None = None,
        gpu_shards: int | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if max_response_bytes < 1:
            raise ValueError(f"max_response_bytes must be positive, got {max_response_bytes}")
        self._max_bytes = max_response_bytes
        self.url = url.rstrip("/")
        self.user = user
        self._token = token
        self._partition = partition
        self._account = account
        self._gpu_types = dict(gpu_types or {})
        self._gpu_shards = gpu_shards
        self._client = httpx.AsyncClient(
            base_url=self.url, timeout=httpx.Timeout(timeout_s), transport=transport
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    # ------------------------------------------------------------------------------- contract

    async def ping(self) -> None:
        """Raise `BackendUnavailable` unless slurmrestd and the controller answer."""
        body = await self._call("GET", f"/slurm/{API}/ping")
        errors = errors_of(body)
        if errors:
            raise BackendUnavailable(f"{self.url}: ping failed: {describe_errors(errors)}")

    async def nodes(self) -> list[NodeReport]:
        """The cluster's nodes as the controller reports them now (`nodes_from`); when the
        site cuts its GPUs into shards (`gpu_shards`), with the shards its jobs hold of each
        GPU (`shards_in_use`, from the job list). Raises `BackendUnavailable` when it cannot
        tell."""
        body = await self._call("GET", f"/slurm/{API}/nodes")
        errors = errors_of(body)
        if errors:
            raise BackendUnavailable(f"{self.url}: no node list: {describe_errors(errors)}")
        nodes = nodes_from(body)
        if not self._gpu_shards:
            return nodes
        body = await self._call("GET", f"/slurm/{API}/jobs")
        errors = errors_of(body)
        if errors:
            raise BackendUnavailable(f"{self.url}: no job list: {describe_errors(errors)}")
        used = shards_in_use(body)
        return [
            node.model_copy(update={"shards_used": used[node.name]}) if node.name in used else node
            for node in nodes
        ]

    async def submit(self, job: JobSpec) -> str:
        body = await self._call(
            "POST",
            f"{_JOB}/submit",
            json=submit_body(
                job,
                partition=self._partition,
                account=self._account,
                gpu_types=self._gpu_types,
                gpu_shards=self._gpu_shards,
            ),
        )
        job_id = body.get("job_id")
        errors = errors_of(body)
        if isinstance(job_id, int) and job_id > 0:
            if not errors:
                return str(job_id)
            # Queued, but with an error: Slurm would hold it pending for good (for example
            # "Requested partition configuration not available now" when the site does not
            # enforce partition limits at submit). A job that cannot start is refused here.
            await self._signal(str(job_id), None)
            raise BackendRejected(
                f"Slurm queued the job of {job.request_id} as {job_id} but said "
                f"{describe_errors(errors)}; it was cancelled"
            )
        self._raise_unavailable(errors, "submit")
        raise BackendRejected(
            f"Slurm refused the job of {job.request_id}: {describe_errors(errors)}"
        )

    async def status(self, job_id: str) -> JobStatus:
        record = await self._controller_job(job_id)
        if record is not None:
            return status_from_job(record)
        db_record = await self._db_job(job_id)
        if db_record is None:
            raise UnknownJob(
                job_id, f"neither the Slurm controller nor its accounting at {self.url} has it"
            )
        return status_from_db(db_record)

    async def suspend(self, job_id: str) -> None:
        current = await self.status(job_id)
        if current.state is JobState.SUSPENDED:
            return
        if current.state is not JobState.RUNNING:
            raise BackendRejected(
                f"Slurm job {job_id} is {current.backend_state}: "
                "only a running job can be suspended"
            )
        # The marker first: should the signal fail, a marker on a running job is inert.
        marked = request_comment(self._request_of(current), stopped_at=time.time())
        await self._update(job_id, {"comment": marked})
        await self._signal(job_id, "STOP")
        await self._settled(job_id)

    async def resume(self, job_id: str) -> None:
        record = await self._controller_job(job_id)
        current = status_from_job(record) if record is not None else await self.status(job_id)
        if current.state is JobState.RUNNING:
            return
        if current.backend_state == "SUSPENDED":
            raise BackendRejected(
                f"Slurm job {job_id} was suspended by the site (scontrol suspend); "
                f"slurmrestd {API} cannot resume it"
            )
        if current.state is not JobState.SUSPENDED or record is None:
            raise BackendRejected(
                f"Slurm job {job_id} is {current.backend_state}: "
                "only a suspended job can be resumed"
            )
        await self._signal(job_id, "CONT")
        await self._settled(job_id)
        stopped_at = stopped_at_of(record.get("comment"))
        if stopped_at is None:
            return
        update: Json = {"comment": request_comment(self._request_of(current))}
        limit = record.get("time_limit")
        if isinstance(limit, int) and limit > 0:
            stopped_min = max(0, int(-(-(time.time() - stopped_at) // 60)))
            update["time_limit"] = limit + stopped_min
        await self._update(job_id, update)

    async def cancel(self, job_id: str) -> None:
        await self._signal(job_id, None)

    async def accounting(self, job_id: str) -> JobAccounting | None:
        db_record = await self._db_job(job_id)
        if db_record is None:
            return None
        record = await self._controller_job(job_id)
        controller = status_from_job(record) if record is not None else None
        return accounting_from_db(db_record, controller=controller)

    async def watch(
        self, job_ids: Sequence[str], interval_s: float = 1.0
    ) -> AsyncIterator[JobStatus]:
        async for status in watch_by_polling(self.status, job_ids, interval_s):
            yield status

    # ------------------------------------------------------------------------------- requests

    @staticmethod
    def _request_of(current: JobStatus) -> str:
        return current.request_id or "unknown"

    async def _controller_job(self, job_id: str) -> Json | None:
        """The controller's record of the job, or None once it has forgotten it."""
        body = await self._call("GET", f"{_JOB}/{_checked_id(job_id)}")
        job = _first_job(body)
        if job is not None:
            return job
        errors = errors_of(body)
        if any(error_number(e) == _INVALID_JOB_ID for e in errors):
            return None
        self._raise_unavailable(errors, f"status of job {job_id}")
        raise BackendRejected(f"Slurm would not show job {job_id}: {describe_errors(errors)}")

    async def _db_job(self, job_id: str) -> Json | None:
        """The accounting's record of the job, or None while it has none."""
        body = await self._call("GET", f"{_DB_JOB}/{_checked_id(job_id)}")
        job = _first_job(body)
        if job is not None:
            return job
        errors = errors_of(body)
        if not errors or any(error_number(e) == _NOTHING_FOUND for e in errors):
            return None
        self._raise_unavailable(errors, f"accounting of job {job_id}")
        raise BackendRejected(
            f"Slurm accounting would not show job {job_id}: {describe_errors(errors)}"
        )

    async def _signal(self, job_id: str, signal: str | None) -> None:
        params = {"signal": signal} if signal else None
        body = await self._call("DELETE", f"{_JOB}/{_checked_id(job_id)}", params=params)
        errors = errors_of(body)
        if not errors:
            return
        what = f"signal {signal} to job {job_id}" if signal else f"cancel of job {job_id}"
        if any(error_number(e) == _INVALID_JOB_ID for e in errors):
            raise UnknownJob(job_id, describe_errors(errors))
        self._raise_unavailable(errors, what)
        raise BackendRejected(f"Slurm refused the {what}: {describe_errors(errors)}")

    async def _settled(self, job_id: str) -> None:
        """Wait until the controller has delivered a signal to the job (its state is no longer
        SIGNALING), polling every 0.1 s for at most `SETTLE_S`; then return either way."""
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            record = await self._controller_job(job_id)
            if record is None or record.get("job_state") != "SIGNALING":
                return
            await asyncio.sleep(0.1)

    async def _update(self, job_id: str, properties: Json) -> None:
        body = await self._call("POST", f"{_JOB}/{_checked_id(job_id)}", json=properties)
        errors = errors_of(body)
        if errors:
            self._raise_unavailable(errors, f"update of job {job_id}")
            raise BackendRejected(
                f"Slurm refused to update job {job_id} with {sorted(properties)}: "
                f"{describe_errors(errors)}"
            )

    def _raise_unavailable(self, errors: list[Json], what: str) -> None:
        if any(_is_communication_error(error_number(e)) for e in errors):
            raise BackendUnavailable(
                f"{self.url}: Slurm could not serve the {what}: {describe_errors(errors)} "
                f"(is the controller up, and the token of {self.user} valid?)"
            )

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json: Json | None = None,
        params: dict[str, str] | None = None,
    ) -> Json:
        """One HTTP call; its JSON body (slurmrestd answers errors as JSON too)."""
        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self._token()}
        try:
            async with self._client.stream(
                method, path, json=json, params=params, headers=headers
            ) as response:
                content = await self._content(response, f"{method} {path}")
        except httpx.TimeoutException as exc:
            raise BackendUnavailable(
                f"{self.url}: {method} {path} timed out ({type(exc).__name__})"
            ) from exc
        except httpx.TransportError as exc:
            raise BackendUnavailable(
                f"{self.url}: {method} {path} failed: {exc or type(exc).__name__}"
            ) from exc
        text = content[:400].decode("utf-8", "replace").strip()[:200]
        if response.status_code in (401, 403):
            raise BackendUnavailable(
                f"{self.url}: slurmrestd refused the credentials of {self.user} "
                f"(HTTP {response.status_code}: {text})"
            )
        body = _json_or_none(content)
        if body is None:
            raise BackendUnavailable(
                f"{self.url}: {method} {path} answered HTTP {response.status_code} "
                f"without slurmrestd's JSON: {text!r}"
            )
        return body

    async def _content(self, response: httpx.Response, what: str) -> bytes:
        """The answer's body, read up to `max_response_bytes`; BackendUnavailable beyond."""
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._max_bytes:
            raise self._too_large(what)
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self._max_bytes:
                raise self._too_large(what)
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, what: str) -> BackendUnavailable:
        return BackendUnavailable(
            f"{self.url}: {what} answered more than {self._max_bytes} bytes "
            "(the backend's max_response_bytes); not read"
        )


def _json_or_none(content: bytes) -> Json | None:
    try:
        body: Any = jsonlib.loads(content)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return None
    return body if isinstance(body, dict) else None


def _first_job(body: Json) -> Json | None:
    """The first record of a job query's `jobs`, if it holds one."""
    jobs = body.get("jobs")
    if isinstance(jobs, list) and jobs and isinstance(jobs[0], dict):
        return jobs[0]
    return None


def _checked_id(job_id: str) -> str:
    """A Slurm job id is a positive integer; anything else names no job (and no other path)."""
    if not job_id.isascii() or not job_id.isdigit() or int(job_id) == 0:
        raise UnknownJob(job_id, "a Slurm job id is a positive integer")
    return job_id
