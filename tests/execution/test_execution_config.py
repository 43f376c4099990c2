"""Job specs, backend references and their factory, token sources, and Slurm's JSON mapping."""

import base64
import json
import os
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from cnbrain.execution import (
    BackendRef,
    BackendUnavailable,
    ClusterBackend,
    JobSpec,
    JobState,
    SlurmBackend,
    backend_for,
    token_from_env,
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


def test_a_slurm_ref_needs_url_user_and_exactly_one_credential_reference() -> None:
    base = {"kind": "slurm", "url": "http://127.0.0.1:6820", "user": "cnbrain-slurm"}
    with pytest.raises(ValidationError, match="exactly one of token_file and token_env"):
        BackendRef.model_validate(base)
    with pytest.raises(ValidationError, match="exactly one of token_file and token_env"):
        BackendRef.model_validate({**base, "token_file": "/run/t", "token_env": "T"})
    with pytest.raises(ValidationError, match="needs url"):
        BackendRef.model_validate({"kind": "slurm", "user": "u", "token_env": "T"})
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        BackendRef.model_validate({**base, "token": "eyJ..."})
    ref = BackendRef.model_validate({**base, "token_env": "SLURM_JWT"})
    assert ref.token_env == "SLURM_JWT"


def test_a_simulator_ref_takes_no_slurm_fields() -> None:
    with pytest.raises(ValidationError, match="a simulator takes no url"):
        BackendRef.model_validate({"kind": "simulator", "url": "http://x:1"})
    with pytest.raises(ValidationError, match="gpu_types"):
        BackendRef.model_validate({"kind": "simulator", "gpu_types": {"A100": "a100"}})
    with pytest.raises(ValidationError):
        BackendRef.model_validate({"kind": "kubernetes"})


@pytest.mark.asyncio
async def test_backend_for_a_slurm_ref_builds_a_slurm_backend() -> None:
    ref = BackendRef(
        kind="slurm",
        url="http://127.0.0.1:6820/",
        user="cnbrain-slurm",
        token_env="CNBRAIN_TEST_NO_SUCH_VARIABLE",
        gpu_types={"H800": "h800"},
    )
    backend = backend_for(ref)
    assert isinstance(backend, SlurmBackend)
    assert isinstance(backend, ClusterBackend)
    assert backend.url == "http://127.0.0.1:6820"
    with pytest.raises(BackendUnavailable, match="CNBRAIN_TEST_NO_SUCH_VARIABLE"):
        await backend.status("1")  # the token is read at the call: unset here
    await backend.aclose()


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


def test_an_expired_jwt_is_refused_with_its_expiry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expired = jwt({"exp": 1_000_000_000, "sun": "cnbrain-slurm"})
    assert jwt_expiry(expired) == 1_000_000_000
    assert jwt_expiry("not-a-jwt") is None
    monkeypatch.setenv("CNBRAIN_TEST_TOKEN", expired)
    with pytest.raises(BackendUnavailable, match="expired at 2001-09-09"):
        token_from_env("CNBRAIN_TEST_TOKEN")()
    valid = jwt({"exp": int(time.time()) + 3600})
    monkeypatch.setenv("CNBRAIN_TEST_TOKEN", valid)
    assert token_from_env("CNBRAIN_TEST_TOKEN")() == valid
    monkeypatch.delenv("CNBRAIN_TEST_TOKEN")
    with pytest.raises(BackendUnavailable, match="no token in the environment variable"):
        token_from_env("CNBRAIN_TEST_TOKEN")()


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
