"""Job specs, backend references and their factory, token sources, and Slurm's JSON mapping."""

import base64
import http.server
import json
import os
import time
from collections.abc import Iterator
from contextlib import aclosing
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import HttpUrl, ValidationError

from cnbrain.domain.backend_ref import BackendRef
from cnbrain.execution import (
    BackendUnavailable,
    ClusterBackend,
    Credential,
    CredentialRefusedError,
    CredentialStore,
    JobSpec,
    JobState,
    SlurmBackend,
    backend_for,
    token_from_file,
)
from cnbrain.execution.credentials import jwt_expiry
from cnbrain.execution.slurm_payloads import (
    accounting_from_db,
    db_exit,
    decode_wait_status,
    request_comment,
    request_id_of,
    state_of,
    status_from_job,
    stopped_at_of,
    submit_body,
    time_limit_minutes,
)
from tests.http_server import serving


def jwt(claims: dict[str, object]) -> str:
    def part(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'HS256'})}.{part(claims)}.c2lnbmF0dXJl"


# --- JobSpec ------------------------------------------------------------------------------------


def test_a_job_spec_checks_its_fields() -> None:
    job = JobSpec(request_id="req-1", command="sleep 3", time_limit_s=60)
    assert (job.cpus, job.memory_mib, job.gpus, job.working_directory) == (1, 512, 0, "/tmp")
    with pytest.raises(ValidationError, match="gpu_type is given but gpus is 0"):
        JobSpec(request_id="req-1", command="true", time_limit_s=60, gpu_type="A100")
    with pytest.raises(ValidationError, match="shell variable names"):
        JobSpec(request_id="req-1", command="true", time_limit_s=60, environment={"A B": "x"})
    with pytest.raises(ValidationError):
        JobSpec(request_id="req/1", command="true", time_limit_s=60)
    with pytest.raises(ValidationError):
        JobSpec(request_id="req-1", command="true", time_limit_s=0)
    with pytest.raises(ValidationError):
        JobSpec(request_id="req-1", command="true", time_limit_s=60, working_directory="tmp")
    assert JobState.TIMEOUT.is_final and not JobState.SUSPENDED.is_final


# --- BackendRef and backend_for -----------------------------------------------------------------


def test_a_slurm_ref_needs_url_user_and_a_credential_name() -> None:
    base = {"kind": "slurm", "url": "http://127.0.0.1:6820", "user": "cnbrain-slurm"}
    with pytest.raises(ValidationError, match="a slurm backend needs credential"):
        BackendRef.model_validate(base)
    with pytest.raises(ValidationError, match="needs url"):
        BackendRef.model_validate({"kind": "slurm", "user": "u", "credential": "c"})
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        BackendRef.model_validate({**base, "credential": "c", "token": "eyJ..."})
    with pytest.raises(ValidationError, match="should match pattern"):
        BackendRef.model_validate({**base, "credential": "../etc/passwd"})
    ref = BackendRef.model_validate({**base, "credential": "local-slurm"})
    assert ref.credential == "local-slurm"


@pytest.mark.parametrize(
    "where", [{"token_file": "/run/cnbrain-slurm/token"}, {"token_env": "CNBRAIN_PEER_TOKEN"}]
)
def test_a_ref_naming_where_a_token_is_is_refused(where: dict[str, str]) -> None:
    ref = {"kind": "slurm", "url": "http://127.0.0.1:6820", "user": "u", "credential": "c"}
    with pytest.raises(ValidationError, match="Extra inputs are not permitted") as refused:
        BackendRef.model_validate({**ref, **where})
    assert [e["loc"] for e in refused.value.errors()] == [(next(iter(where)),)]


def test_a_simulator_ref_takes_no_slurm_fields() -> None:
    with pytest.raises(ValidationError, match="a simulator takes no url"):
        BackendRef.model_validate({"kind": "simulator", "url": "http://x:1"})
    with pytest.raises(ValidationError, match="gpu_types"):
        BackendRef.model_validate({"kind": "simulator", "gpu_types": {"A100": "a100"}})
    with pytest.raises(ValidationError):
        BackendRef.model_validate({"kind": "kubernetes"})


@pytest.mark.asyncio
async def test_backend_for_a_slurm_ref_builds_a_slurm_backend(tmp_path: Path) -> None:
    ref = BackendRef(
        kind="slurm",
        url=HttpUrl("http://127.0.0.1:6820/"),
        user="cnbrain-slurm",
        credential="local-slurm",
        gpu_types={"H800": "h800"},
    )
    missing = tmp_path / "no-such-token"
    store = CredentialStore({"local-slurm": Credential(url=HttpUrl(URL), token_file=missing)})
    backend = backend_for(ref, credentials=store)
    assert isinstance(backend, SlurmBackend)
    assert isinstance(backend, ClusterBackend)
    assert backend.url == "http://127.0.0.1:6820"
    with pytest.raises(BackendUnavailable, match="no-such-token"):
        await backend.status("1")  # the token is read at the call: no file here
    await backend.aclose()
    async with aclosing(backend_for(ref)) as without_store:  # an empty store: nothing to send
        with pytest.raises(BackendUnavailable, match="no credential 'local-slurm'"):
            await without_store.status("1")


# --- the credential store ------------------------------------------------------------------------

URL = "http://127.0.0.1:6820"


def store_of(url: str, token_file: Path) -> CredentialStore:
    return CredentialStore({"slurm": Credential(url=HttpUrl(url), token_file=token_file)})


def test_a_credential_is_only_for_its_url_and_below(tmp_path: Path) -> None:
    store = store_of("http://slurm.example:6820/east", tmp_path / "t")
    for url in (
        "http://slurm.example:6820/east",
        "http://slurm.example:6820/east/",
        "http://SLURM.example:6820/east/v1",
    ):
        store.check("slurm", url)
    for url in (
        "https://slurm.example:6820/east",  # another scheme
        "http://evil.example:6820/east",  # another host
        "http://slurm.example:6821/east",  # another port
        "http://slurm.example/east",  # the scheme's default port
        "http://slurm.example:6820/eastern",  # not under the path
        "http://slurm.example:6820/",
        "http://slurm.example:6820/east/../west",
        "http://me:pw@slurm.example:6820/east",
        "http://slurm.example:6820/east?x=1",
    ):
        with pytest.raises(CredentialRefusedError) as refused:
            store.check("slurm", url)
        assert refused.value.field == "url", url
    with pytest.raises(CredentialRefusedError, match="no credential 'other'") as unknown:
        store.check("other", "http://slurm.example:6820/east")
    assert unknown.value.field == "credential"
    store_of(URL, tmp_path / "t").check("slurm", URL + "/")  # no path: the whole server


def test_a_credential_needs_an_absolute_token_file_and_a_plain_url() -> None:
    with pytest.raises(ValidationError, match="absolute"):
        Credential.model_validate({"url": URL, "token_file": "token"})
    with pytest.raises(ValidationError, match="no user, password, query"):
        Credential.model_validate({"url": "http://u:p@h:1", "token_file": "/t"})
    with pytest.raises(ValidationError, match="Extra inputs"):
        Credential.model_validate({"url": URL, "token_file": "/t", "token": "s3cret"})


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every GET as slurmrestd's ping does, and records its headers."""

    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        self.seen.append(dict(self.headers))
        body = b'{"errors": [], "pings": []}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[str]:
    """The URL of a real HTTP server that records what it is sent (`_Recorder.seen`)."""
    _Recorder.seen.clear()
    with serving(_Recorder) as url:
        yield url


def _slurm_backend_for(ref: BackendRef, credentials: CredentialStore) -> SlurmBackend:
    backend = backend_for(ref, credentials=credentials)
    assert isinstance(backend, SlurmBackend)
    return backend


@pytest.mark.asyncio
async def test_a_stored_ref_to_another_url_never_gets_the_token(
    tmp_path: Path, recorder: str
) -> None:
    token = tmp_path / "token"
    token.write_text("the-slurm-jwt\n")
    store = CredentialStore(
        {
            "local-slurm": Credential(url=HttpUrl(URL), token_file=token),
            "recorder": Credential(url=HttpUrl(recorder), token_file=token),
        }
    )
    # as if the map had been written before the store changed: the ref was never checked
    stolen = BackendRef(kind="slurm", url=HttpUrl(recorder), user="u", credential="local-slurm")
    async with _slurm_backend_for(stolen, store) as backend:
        with pytest.raises(BackendUnavailable, match=r"only for http://127\.0\.0\.1:6820/"):
            await backend.ping()
    assert _Recorder.seen == []
    allowed = stolen.model_copy(update={"credential": "recorder"})
    async with _slurm_backend_for(allowed, store) as backend:
        await backend.ping()
    assert [seen["X-SLURM-USER-TOKEN"] for seen in _Recorder.seen] == ["the-slurm-jwt"]


# --- token sources ------------------------------------------------------------------------------


def test_a_token_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    file = tmp_path / "token"
    file.write_text("first\n")
    read = token_from_file(file)
    assert read() == "first"
    file.write_text("second, renewed\n")
    os.utime(file, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert read() == "second, renewed"
    file.unlink()
    with pytest.raises(BackendUnavailable, match="cannot read the token file"):
        read()
    file.write_text("  \n")
    with pytest.raises(BackendUnavailable, match="no token in the token file"):
        token_from_file(file)()


def test_an_expired_jwt_is_refused_with_its_expiry(tmp_path: Path) -> None:
    expired = jwt({"exp": 1_000_000_000, "sun": "cnbrain-slurm"})
    assert jwt_expiry(expired) == 1_000_000_000
    assert jwt_expiry("not-a-jwt") is None
    file = tmp_path / "token"
    file.write_text(expired)
    with pytest.raises(BackendUnavailable, match="expired at 2001-09-09"):
        token_from_file(file)()
    valid = jwt({"exp": int(time.time()) + 3600})
    file.write_text(valid)
    assert token_from_file(file)() == valid


# --- Slurm's JSON -------------------------------------------------------------------------------


def test_submit_body_maps_resources_tags_and_environment() -> None:
    job = JobSpec(
        request_id="req-7",
        name="train",
        command="python train.py",
        cpus=4,
        memory_mib=8192,
        gpus=2,
        gpu_type="H800",
        time_limit_s=3601,
        environment={"EPOCHS": "3"},
        output_path="/tmp/out.log",
    )
    body = submit_body(job, partition="gpu", gpu_types={"H800": "h800"})
    assert body["script"] == "#!/bin/sh\npython train.py\n"
    props = body["job"]
    assert props["name"] == "req-7/train"
    assert props["comment"] == "cnbrain request=req-7"
    assert (props["nodes"], props["tasks"], props["cpus_per_task"]) == (1, 1, 4)
    assert props["memory_per_node"] == 8192
    assert props["time_limit"] == 61
    assert props["gres"] == "gpu:h800:2"
    assert props["partition"] == "gpu"
    assert "account" not in props
    assert props["environment"] == {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "EPOCHS": "3",
        "CNBRAIN_REQUEST_ID": "req-7",
    }
    assert props["standard_output"] == props["standard_error"] == "/tmp/out.log"
    untyped = submit_body(job.model_copy(update={"gpu_type": None, "command": "#!/bin/bash\nx"}))
    assert untyped["job"]["gres"] == "gpu:2"
    assert untyped["script"] == "#!/bin/bash\nx"
    assert time_limit_minutes(1) == 1 and time_limit_minutes(120) == 2


def test_a_fraction_of_a_gpu_asks_its_share_of_the_sites_shards() -> None:
    job = JobSpec(
        request_id="req-8",
        command="serve",
        gpus=1,
        gpu_milli=250,
        gpu_type="T4",
        time_limit_s=60,
    )
    assert submit_body(job, gpu_shards=8)["job"]["gres"] == "shard:2"
    assert submit_body(job, gpu_shards=100)["job"]["gres"] == "shard:25"
    # A site that does not shard its GPUs runs a fraction on a whole GPU.
    assert submit_body(job, gpu_types={"T4": "t4"})["job"]["gres"] == "gpu:t4:1"
    for wrong in ({"gpus": 2}, {"nodes": 2}, {"gpu_milli": 1000}, {"gpu_milli": 0}):
        with pytest.raises(ValidationError):
            JobSpec.model_validate({**job.model_dump(), **wrong})
    with pytest.raises(ValidationError, match="gpu_shards"):
        BackendRef.model_validate({"kind": "simulator", "gpu_shards": 8})


def test_slurm_words_map_onto_the_closed_states() -> None:
    assert state_of("PENDING") is JobState.PENDING
    assert state_of("COMPLETING") is JobState.RUNNING
    assert state_of("STOPPED") is JobState.SUSPENDED
    assert state_of("OUT_OF_MEMORY") is JobState.FAILED
    assert state_of("PREEMPTED") is JobState.CANCELLED
    assert state_of("TIMEOUT") is JobState.TIMEOUT
    assert state_of("SOMETHING_NEW") is JobState.RUNNING


def test_wait_statuses_decode_into_exit_code_or_signal() -> None:
    assert decode_wait_status(0) == (0, None)
    assert decode_wait_status(768) == (3, None)
    assert decode_wait_status(15) == (None, 15)
    assert decode_wait_status(None) == (None, None)


def test_tags_and_the_stopped_marker_round_trip() -> None:
    assert request_id_of("req-7/train", "cnbrain request=req-7") == "req-7"
    assert request_id_of("req-8/train") == "req-8"
    assert request_id_of("someone-elses-job", "") is None
    marked = request_comment("req-7", stopped_at=1_800_000_123.4)
    assert marked == "cnbrain request=req-7 stopped-at=1800000123"
    assert request_id_of("x", marked) == "req-7"
    assert stopped_at_of(marked) == 1_800_000_123
    assert stopped_at_of(request_comment("req-7")) is None


def test_a_controller_record_becomes_a_status() -> None:
    record = {
        "job_id": 12,
        "name": "req-7/train",
        "comment": "cnbrain request=req-7",
        "job_state": "FAILED",
        "state_reason": "NonZeroExitCode",
        "nodes": "localhost",
        "exit_code": 768,
        "submit_time": 1_800_000_000,
        "start_time": 1_800_000_001,
        "end_time": 1_800_000_004,
    }
    status = status_from_job(record)
    assert (status.job_id, status.request_id, status.state) == ("12", "req-7", JobState.FAILED)
    assert (status.exit_code, status.signal, status.reason) == (3, None, "NonZeroExitCode")
    assert status.ended_at is not None and status.started_at is not None
    assert status.message == "Slurm job 12 FAILED, reason NonZeroExitCode, exit code 3"
    pending = status_from_job({**record, "job_state": "PENDING", "state_reason": "None"})
    assert pending.started_at is None and pending.ended_at is None and pending.exit_code is None
    assert pending.reason == ""
    never_ran = status_from_job({**record, "job_state": "CANCELLED", "nodes": "", "exit_code": 0})
    assert never_ran.started_at is None and never_ran.ended_at is not None


def test_accounting_prefers_the_controllers_exit_code_over_dbv0038s() -> None:
    db_record = {
        "job_id": 12,
        "name": "req-7/train",
        "state": {"current": "FAILED", "reason": "None"},
        "exit_code": {"status": "SUCCESS", "return_code": 0},  # what dbv0.0.38 says for exit 3
        "allocation_nodes": 1,
        "time": {"elapsed": 3, "submission": 1, "start": 2, "end": 5, "suspended": 0},
        "tres": {
            "allocated": [
                {"type": "cpu", "name": None, "count": 2},
                {"type": "mem", "name": None, "count": 100},
                {"type": "energy", "name": None, "count": None},
                {"type": "gres", "name": "gpu", "count": 1},
            ]
        },
        "steps": [{"time": {"total": {"seconds": 1, "microseconds": 500_000}}}],
    }
    assert db_exit(db_record, JobState.FAILED) == (None, None)
    alone = accounting_from_db(db_record)
    assert alone.exit_code is None
    assert (alone.cpus, alone.memory_mib, alone.gpus) == (2, 100, 1)
    assert alone.tres == {"cpu": 2, "mem": 100, "gres/gpu": 1}
    assert alone.cpu_time_s == pytest.approx(1.5)
    assert alone.elapsed_s == 3
    assert alone.started_at is not None
    assert accounting_from_db({**db_record, "allocation_nodes": 0}).started_at is None
    controller = status_from_job(
        {"job_id": 12, "name": "req-7/train", "job_state": "FAILED", "exit_code": 768}
    )
    assert accounting_from_db(db_record, controller=controller).exit_code == 3
    signalled = {**db_record, "exit_code": {"status": "SIGNALED", "signal": {"signal_id": 9}}}
    assert db_exit(signalled, JobState.CANCELLED) == (None, 9)
    completed = {**db_record, "state": {"current": "COMPLETED"}}
    assert accounting_from_db(completed).exit_code == 0
