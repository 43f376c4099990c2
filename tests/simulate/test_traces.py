"""Trace files, the Alibaba v2023 converter, the synthetic generator and `cnbrain trace`."""

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from cnbrain.cli.main import main
from cnbrain.domain.enums import WorkloadClass
from cnbrain.domain.flows import Delivery, Endpoint, Flows, Serving, Staging
from cnbrain.netmap.china import china_document
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.topology_zoo import zoo_document
from cnbrain.placement.request_check import check_request
from cnbrain.simulate.alibaba import convert_alibaba_pods
from cnbrain.simulate.generator import DEFAULT_MIX, synthetic_trace
from cnbrain.simulate.trace import TraceJob
from cnbrain.simulate.trace_files import TraceError, read_trace, write_trace

DATA = Path(__file__).resolve().parents[1] / "data"
PODS = DATA / "openb_pod_list_default_head400.csv"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)


@pytest.fixture(scope="module")
def china() -> ComputeNetworkMap:
    return ComputeNetworkMap.from_document(china_document())


@pytest.fixture(scope="module")
def chinanet() -> ComputeNetworkMap:
    return ComputeNetworkMap.from_document(zoo_document(DATA / "Chinanet.gml"))


@pytest.fixture(scope="module")
def bare_china() -> ComputeNetworkMap:
    """`china` with every accelerator (and every accelerator node) removed."""
    document = china_document()
    sites = tuple(
        site.model_copy(
            update={
                "capacity": site.capacity.model_copy(update={"accelerators": {}}),
                "node_pools": tuple(p for p in site.node_pools if p.accelerator is None),
            }
        )
        for site in document.sites
    )
    return ComputeNetworkMap.from_document(document.model_copy(update={"sites": sites}))


def _jobs() -> list[TraceJob]:
    return [
        TraceJob(
            id="b",
            arrival_s=10.25,
            duration_s=3600.0,
            source_province="GD",
            workload_class=WorkloadClass.TRAINING,
            tenant="t1",
            cpu=64.0,
            memory_gib=512.0,
            accelerator_model="A100",
            accelerator_count=8,
            min_bandwidth_gbps=5.0,
            flows=Flows(
                staging=(
                    Staging(
                        source=Endpoint(site="SH-hub-qingpu"), volume_gb=1500.5, max_rate_gbps=10.0
                    ),
                    Staging(source=Endpoint(province="GD"), volume_gb=20.0, mode="stream"),
                ),
                delivery=(Delivery(destination=Endpoint(province="GD"), volume_gb=75.0),),
            ),
        ),
        TraceJob(
            id="c",
            arrival_s=0.1 + 0.2,
            duration_s=1e-3,
            source_province="BJ",
            cpu=0.5,
            memory_gib=1 / 3,
        ),
        TraceJob(
            id="a",
            arrival_s=10.25,
            duration_s=7.0,
            source_province="SH",
            cpu=2.0,
            memory_gib=4.0,
            workload_class=WorkloadClass.SERVICE,
            max_latency_ms=40.0,
            min_bandwidth_gbps=0.5,
            flows=Flows(
                serving=Serving(provinces=("SH", "ZJ"), rate_gbps=1.0, max_latency_ms=20.0)
            ),
        ),
    ]


# --- trace files --------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_round_trip_keeps_every_field_and_sorts(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"sub/trace{suffix}"
    assert write_trace(_jobs(), path) == 3
    back = read_trace(path)
    assert [job.id for job in back] == ["c", "a", "b"]  # by arrival, then id
    assert back == sorted(_jobs(), key=lambda job: (job.arrival_s, job.id))


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_round_trip_of_a_generated_trace(
    tmp_path: Path, suffix: str, china: ComputeNetworkMap
) -> None:
    jobs = synthetic_trace(cmap=china, jobs=300, hours=24, seed=5)
    path = tmp_path / f"trace{suffix}"
    write_trace(jobs, path)
    assert read_trace(path) == jobs


def test_flows_read_from_json_with_whole_numbers_and_bad_flows_name_the_field(
    tmp_path: Path,
) -> None:
    good = tmp_path / "good.jsonl"
    record = {
        "id": "j",
        "arrival_s": 0,
        "duration_s": 60,
        "source_province": "GD",
        "cpu": 1,
        "memory_gib": 1,
        "flows": {"staging": [{"source": {"province": "SH"}, "volume_gb": 100}]},
    }
    good.write_text(json.dumps(record) + "\n")
    (job,) = read_trace(good)
    assert job.flows is not None
    assert job.flows.staging[0].volume_gb == 100.0
    bad = tmp_path / "bad.csv"
    bad.write_text(
        'id,arrival_s,duration_s,source_province,cpu,memory_gib,flows\nj,0,60,GD,1,1,{"x"\n'
    )
    with pytest.raises(TraceError, match=r"line 2: flows: not valid JSON"):
        read_trace(bad)
    record["flows"] = {"staging": [{"source": {"site": "a", "province": "SH"}, "volume_gb": 1}]}
    good.write_text(json.dumps(record) + "\n")
    with pytest.raises(TraceError, match=r"line 1: flows.staging.0.source: .*exactly one"):
        read_trace(good)


def test_csv_empty_cells_are_absent_fields(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "duration_s,id,arrival_s,source_province,cpu,memory_gib,tenant,max_latency_ms\n"
        "60,j1,5,BJ,1,2,,\n"
        "\n"
        "60,j0,5,BJ,1,2,t9,12.5\n"
    )
    first, second = read_trace(path)
    assert (first.id, first.tenant, first.max_latency_ms) == ("j0", "t9", 12.5)
    assert (second.id, second.tenant, second.max_latency_ms) == ("j1", "default", None)
    assert second.workload_class is WorkloadClass.BATCH


_GOOD = {
    "id": "x",
    "arrival_s": 0,
    "duration_s": 1,
    "source_province": "BJ",
    "cpu": 1,
    "memory_gib": 1,
}


@pytest.mark.parametrize(
    ("third_line", "field", "words"),
    [
        ({**_GOOD, "duration_s": 0}, "duration_s", "greater than 0"),
        ({**_GOOD, "colour": "red"}, "colour", "not permitted"),
        ({k: v for k, v in _GOOD.items() if k != "cpu"}, "cpu", "required"),
        ({**_GOOD, "workload_class": "gaming"}, "workload_class", "training"),
        ({**_GOOD, "accelerator_count": 2}, "accelerator_model", "required when"),
        ({**_GOOD, "accelerator_model": "Z80", "accelerator_count": 1}, "accelerator_model", "Z80"),
        (
            {**_GOOD, "accelerator_model": "T4", "accelerator_count": 2, "accelerator_milli": 300},
            "accelerator_milli",
            "accelerator_count 1",
        ),
        ({**_GOOD, "accelerator_count": 1, "accelerator_milli": 1000}, "accelerator_milli", "less"),
        ({**_GOOD, "id": "first"}, "id", "line 1"),
        ({**_GOOD, "duration_s": math.inf}, "duration_s", "finite"),  # written as Infinity
        ('{"id": "x", "arrival_s": 0', None, "not valid JSON"),
        ("[1, 2]", None, "JSON object"),
    ],
)
def test_a_bad_jsonl_line_names_file_line_and_field(
    tmp_path: Path, third_line: object, field: str | None, words: str
) -> None:
    path = tmp_path / "bad.jsonl"
    text = third_line if isinstance(third_line, str) else json.dumps(third_line)
    lines = [{**_GOOD, "id": "first"}, {**_GOOD, "id": "second"}]
    path.write_text("\n".join([*(json.dumps(line) for line in lines), text]) + "\n")
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    error = caught.value
    assert (error.path, error.line, error.field) == (path, 3, field)
    assert words in error.message
    assert str(error).startswith(f"{path}: line 3: ")


@pytest.mark.parametrize(
    ("text", "line", "field", "words"),
    [
        ("id,arrival_s,duration_s,source_province,cpu,memory_gib,gpus\n", 1, "gpus", "unknown"),
        ("id,arrival_s,duration_s,source_province,cpu\n", 1, "memory_gib", "missing"),
        ("id,id,arrival_s,duration_s,source_province,cpu,memory_gib\n", 1, "id", "more than once"),
        (
            "id,arrival_s,duration_s,source_province,cpu,memory_gib\nj,0,1,BJ,1,1\nk,0,1,BJ,x,1\n",
            3,
            "cpu",
            "number",
        ),
        ("id,arrival_s,duration_s,source_province,cpu,memory_gib\nj,0,1,BJ,1\n", 2, None, "cells"),
        (
            "id,arrival_s,duration_s,source_province,cpu,memory_gib\n\nj,0,,BJ,1,1\n",
            3,
            "duration_s",
            "required",
        ),
        (
            "id,arrival_s,duration_s,source_province,cpu,memory_gib,accelerator_count\n"
            "j,0,1,BJ,1,1,1.5\n",
            2,
            "accelerator_count",
            "integer",
        ),
        ("", 1, None, "empty"),
    ],
)
def test_a_bad_csv_line_names_file_line_and_field(
    tmp_path: Path, text: str, line: int, field: str | None, words: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert (caught.value.path, caught.value.line, caught.value.field) == (path, line, field)
    assert words in caught.value.message


def test_unknown_suffix_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"unknown trace format '\.txt'"):
        read_trace(tmp_path / "t.txt")
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(tmp_path / "missing.jsonl")


# --- Alibaba v2023 -------------------------------------------------------------------------


def _check_jobs_fit(jobs: list[TraceJob], cmap: ComputeNetworkMap) -> None:
    for job in jobs:
        if job.accelerator_count:
            assert job.accelerator_model in cmap.accelerator_models
        else:
            assert job.accelerator_model is None
        check_request(job.to_request(), cmap)


def test_alibaba_sample_on_china(china: ComputeNetworkMap) -> None:
    jobs, report = convert_alibaba_pods(PODS, cmap=china, seed=1)
    assert (report.pods, report.jobs, len(jobs)) == (400, 376, 376)
    assert report.skipped == {"never_scheduled": 24}
    assert (report.shared_gpu_pods, report.drawn_models, report.model_fallbacks) == (120, 353, {})
    assert Counter(job.workload_class for job in jobs) == {
        WorkloadClass.TRAINING: 213,
        WorkloadClass.INFERENCE: 140,
        WorkloadClass.SERVICE: 15,
        WorkloadClass.BATCH: 8,
    }
    assert Counter(job.accelerator_count for job in jobs) == {1: 349, 8: 4, 0: 23}
    assert sum(job.accelerator_milli is not None for job in jobs) == report.shared_gpu_pods
    assert {job.accelerator_model for job in jobs} <= {"A100", "T4", "V100", "L40S", None}
    assert jobs == sorted(jobs, key=lambda job: (job.arrival_s, job.id))
    assert len({job.tenant for job in jobs}) == 8
    first = jobs[0]
    assert (first.id, first.arrival_s, first.duration_s) == ("openb-pod-0000", 0.0, 12537496.0)
    assert (first.cpu, first.memory_gib, first.accelerator_count) == (12.0, 16.0, 1)
    assert first.workload_class is WorkloadClass.INFERENCE
    assert (first.max_latency_ms, first.min_bandwidth_gbps) == (40.0, 0.5)
    for job in jobs:
        expected = {
            WorkloadClass.INFERENCE: (40.0, 0.5),
            WorkloadClass.SERVICE: (40.0, 0.5),
            WorkloadClass.TRAINING: (None, 5.0),
            WorkloadClass.BATCH: (None, 0.0),
        }[job.workload_class]
        assert (job.max_latency_ms, job.min_bandwidth_gbps) == expected
    _check_jobs_fit(jobs, china)


def test_alibaba_sample_on_chinanet_falls_back_for_v100(chinanet: ComputeNetworkMap) -> None:
    assert "V100" not in chinanet.accelerator_models
    jobs, report = convert_alibaba_pods(PODS, cmap=chinanet, seed=1)
    assert (report.jobs, report.skipped) == (376, {"never_scheduled": 24})
    assert set(report.model_fallbacks) == {"V100->A100"}
    assert {job.source_province for job in jobs} <= set(chinanet.province_codes)
    _check_jobs_fit(jobs, chinanet)


def test_alibaba_is_deterministic_per_seed(china: ComputeNetworkMap) -> None:
    one, _ = convert_alibaba_pods(PODS, cmap=china, seed=1)
    again, _ = convert_alibaba_pods(PODS, cmap=china, seed=1)
    other, _ = convert_alibaba_pods(PODS, cmap=china, seed=2)
    assert one == again
    assert [j.source_province for j in one] != [j.source_province for j in other]
    assert [j.tenant for j in one] != [j.tenant for j in other]
    assert [j.accelerator_model for j in one] != [j.accelerator_model for j in other]

    def times_and_sizes(job: TraceJob) -> tuple[object, ...]:
        return (job.id, job.arrival_s, job.duration_s, job.cpu, job.accelerator_count)

    assert list(map(times_and_sizes, one)) == list(map(times_and_sizes, other))


def test_alibaba_provinces_follow_demand_weights(china: ComputeNetworkMap) -> None:
    jobs, _ = convert_alibaba_pods(PODS, cmap=china, seed=3)
    counts = Counter(job.source_province for job in jobs)
    # Guangdong (8.9% of the population) against Tibet (0.26%).
    assert counts["GD"] > 15 > counts["XZ"]


def test_alibaba_rules_on_handmade_pods(
    tmp_path: Path, china: ComputeNetworkMap, chinanet: ComputeNetworkMap
) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(
        f"{POD_HEADER}\n"
        "p-spec,4000,8192,2,1000,V100M16|V100M32,BE,Running,100,900,200\n"
        "p-a10,2000,4096,1,500,A10|T4,LS,Running,150,400,160\n"
        "p-p100,1000,1024,1,1000,P100,Burstable,Failed,160,500,170\n"
        "p-cpu,500,512,0,0,,Guaranteed,Running,170,300,175\n"
        "p-batch,500,512,0,0,,BE,Succeeded,180,300,181\n"
        "p-pending,500,512,0,0,,BE,Pending,190,300,\n"
        "p-nodel,500,512,0,0,,BE,Running,195,,196\n"
        "p-zero,500,512,0,0,,BE,Failed,197,198,198\n"
    )
    jobs, report = convert_alibaba_pods(path, cmap=china, seed=0, tenants=1)
    assert report.skipped == {
        "never_scheduled": 1,
        "no_deletion_time": 1,
        "non_positive_duration": 1,
    }
    assert (report.shared_gpu_pods, report.drawn_models) == (1, 0)
    by_id = {job.id: job for job in jobs}
    assert [job.id for job in jobs] == ["p-spec", "p-a10", "p-p100", "p-cpu", "p-batch"]
    spec = by_id["p-spec"]
    assert (spec.arrival_s, spec.duration_s, spec.cpu, spec.memory_gib) == (0.0, 700.0, 4.0, 8.0)
    assert (spec.accelerator_model, spec.accelerator_count) == ("V100", 2)
    assert spec.workload_class is WorkloadClass.TRAINING
    assert (by_id["p-a10"].accelerator_model, by_id["p-a10"].accelerator_count) == ("L40S", 1)
    # A shared GPU: its request asks half of one L40S; a whole one asks no fraction.
    assert by_id["p-a10"].accelerator_milli == 500 and by_id["p-a10"].accelerators == 0.5
    accelerator = by_id["p-a10"].to_request().resources.accelerator
    assert accelerator is not None and (accelerator.count, accelerator.milli) == (1, 500)
    assert by_id["p-p100"].accelerator_milli is None and by_id["p-spec"].accelerators == 2.0
    assert by_id["p-a10"].workload_class is WorkloadClass.INFERENCE
    assert by_id["p-p100"].accelerator_model == "V100"
    assert by_id["p-cpu"].workload_class is WorkloadClass.SERVICE
    assert by_id["p-batch"].workload_class is WorkloadClass.BATCH
    assert {job.tenant for job in jobs} == {"tenant-1"}
    on_zoo, zoo_report = convert_alibaba_pods(path, cmap=chinanet, seed=0)
    assert zoo_report.model_fallbacks == {"V100->A100": 2}
    assert {job.accelerator_model for job in on_zoo} == {"A100", "L40S", None}


def test_alibaba_gpu_pods_are_skipped_on_a_map_without_accelerators(
    bare_china: ComputeNetworkMap,
) -> None:
    jobs, report = convert_alibaba_pods(PODS, cmap=bare_china, seed=1)
    assert report.skipped == {"never_scheduled": 24, "no_accelerators_on_map": 353}
    assert len(jobs) == 23 and all(job.accelerator_count == 0 for job in jobs)


@pytest.mark.parametrize(
    ("row", "field", "words"),
    [
        ("p1,1000,1024,1,1000,H9,BE,Running,0,10,1", "gpu_spec", "unknown GPU type 'H9'"),
        ("p1,lots,1024,1,1000,,BE,Running,0,10,1", "cpu_milli", "not a number"),
        ("p1,1000,1024,1.5,1000,,BE,Running,0,10,1", "num_gpu", "whole number"),
        ("p1,1000,-1,1,1000,,BE,Running,0,10,1", "memory_mib", "non-negative"),
        ("p1,1000,1024,1,1000,,BE,Running,,10,1", "creation_time", "empty"),
        ("p0,1000,1024,1,1000,,BE,Running,0,10,1", "name", "already the name of line 2"),
    ],
)
def test_alibaba_bad_pod_rows_name_file_line_and_column(
    tmp_path: Path, china: ComputeNetworkMap, row: str, field: str, words: str
) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(f"{POD_HEADER}\np0,1000,1024,0,0,,BE,Running,0,10,1\n{row}\n")
    with pytest.raises(TraceError) as caught:
        convert_alibaba_pods(path, cmap=china, seed=0)
    assert (caught.value.path, caught.value.line, caught.value.field) == (path, 3, field)
    assert words in caught.value.message


def test_alibaba_missing_column_and_tenants(tmp_path: Path, china: ComputeNetworkMap) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli\np0,1000\n")
    with pytest.raises(TraceError, match="line 1: memory_mib: required column"):
        convert_alibaba_pods(path, cmap=china, seed=0)
    with pytest.raises(ValueError, match="tenants"):
        convert_alibaba_pods(PODS, cmap=china, seed=0, tenants=0)


def test_a_pod_list_without_times_arrives_in_file_order_and_stays_a_day(
    tmp_path: Path, china: ComputeNetworkMap
) -> None:
    path = tmp_path / "multigpu.csv"  # the five columns of the multigpu50 list
    path.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        "m0,12000,16384,8,1000\n"
        "m1,6000,12288,1,460\n"
        "m2,4000,8192,0,0\n"
    )
    jobs, report = convert_alibaba_pods(path, cmap=china, seed=0)
    assert (report.jobs, report.skipped, report.shared_gpu_pods) == (3, {}, 1)
    assert report.drawn_models == 2  # no gpu_spec: each GPU pod's type is drawn
    assert [(j.id, j.arrival_s, j.duration_s) for j in jobs] == [
        ("m0", 0.0, 86400.0),
        ("m1", 60.0, 86400.0),
        ("m2", 120.0, 86400.0),
    ]
    # No qos: best effort, so GPU pods are training and the CPU pod batch.
    assert [j.workload_class for j in jobs] == [
        WorkloadClass.TRAINING,
        WorkloadClass.TRAINING,
        WorkloadClass.BATCH,
    ]
    assert jobs[0].accelerator_count == 8 and jobs[0].to_request().resources.nodes == 1
    partly = tmp_path / "partly.csv"
    partly.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time\np,1,1,0,0,0\n")
    with pytest.raises(TraceError, match="deletion_time: required column"):
        convert_alibaba_pods(partly, cmap=china, seed=0)


# --- synthetic generator -------------------------------------------------------------------


def test_synthetic_arrivals_follow_the_diurnal_shape(china: ComputeNetworkMap) -> None:
    jobs = synthetic_trace(cmap=china, jobs=4000, hours=48, seed=11)
    assert len(jobs) == 4000
    arrivals = [job.arrival_s for job in jobs]
    assert arrivals == sorted(arrivals) and arrivals[0] >= 0 and arrivals[-1] < 48 * 3600
    peak = sum(1 for t in arrivals if 6 <= (t / 3600) % 24 < 18)
    # Expected share in the peak half: 1/2 + 0.6/pi = 0.691.
    assert abs(peak / len(jobs) - (0.5 + 0.6 / math.pi)) < 0.04
    per_hour = Counter(int(t // 3600) % 24 for t in arrivals)
    assert sum(per_hour[h] for h in (11, 12)) > 2.5 * sum(per_hour[h] for h in (23, 0))


def test_synthetic_mix_shapes_and_requests(china: ComputeNetworkMap) -> None:
    jobs = synthetic_trace(cmap=china, jobs=4000, hours=48, seed=12)
    counts = Counter(job.workload_class for job in jobs)
    for workload, share in DEFAULT_MIX.items():
        assert abs(counts[workload] / len(jobs) - share) < 0.03
    bounds = {
        WorkloadClass.TRAINING: (1800, 72 * 3600),
        WorkloadClass.INFERENCE: (300, 24 * 3600),
        WorkloadClass.BATCH: (600, 6 * 3600),
        WorkloadClass.SERVICE: (3600, 14 * 86400),
    }
    for job in jobs:
        low, high = bounds[job.workload_class]
        assert low <= job.duration_s <= high
        if job.workload_class is WorkloadClass.TRAINING:
            assert job.accelerator_count in (4, 8, 16)
        elif job.workload_class is WorkloadClass.INFERENCE:
            assert job.accelerator_count in (1, 2) and job.max_latency_ms == 40.0
        else:
            assert job.accelerator_count == 0
    assert len({job.id for job in jobs}) == len(jobs)
    _check_jobs_fit(jobs, china)


def test_synthetic_is_deterministic_and_takes_a_mix(
    chinanet: ComputeNetworkMap, bare_china: ComputeNetworkMap
) -> None:
    one = synthetic_trace(cmap=chinanet, jobs=200, hours=10, seed=1)
    assert one == synthetic_trace(cmap=chinanet, jobs=200, hours=10, seed=1)
    assert one != synthetic_trace(cmap=chinanet, jobs=200, hours=10, seed=2)
    _check_jobs_fit(one, chinanet)
    cpu_only = synthetic_trace(
        cmap=bare_china, jobs=50, hours=1, seed=1, mix={WorkloadClass.BATCH: 1.0}
    )
    assert {job.workload_class for job in cpu_only} == {WorkloadClass.BATCH}
    with pytest.raises(ValueError, match="no accelerators"):
        synthetic_trace(cmap=bare_china, jobs=50, hours=1, seed=1)
    with pytest.raises(ValueError, match="mix"):
        synthetic_trace(cmap=chinanet, jobs=5, hours=1, seed=1, mix={WorkloadClass.BATCH: 0.0})
    with pytest.raises(ValueError, match="hours"):
        synthetic_trace(cmap=chinanet, jobs=5, hours=0, seed=1)
    assert synthetic_trace(cmap=chinanet, jobs=0, hours=1, seed=1) == []


# --- CLI -----------------------------------------------------------------------------------


def test_cli_trace_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "alibaba.csv"
    gml = str(DATA / "Chinanet.gml")
    assert (
        main(
            [
                "trace",
                "convert-alibaba",
                "--pods",
                str(PODS),
                "--map",
                gml,
                "--seed",
                "4",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"wrote 376 jobs to {out} (")
    assert line.endswith("400 pods, skipped 24 (never_scheduled 24)")
    assert len(read_trace(out)) == 376

    out = tmp_path / "syn.jsonl"
    assert (
        main(
            [
                "trace",
                "synthetic",
                "--map",
                "china",
                "--jobs",
                "50",
                "--hours",
                "2",
                "--seed",
                "4",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith(f"wrote 50 jobs to {out} (")
    assert read_trace(out) == synthetic_trace(
        cmap=ComputeNetworkMap.from_document(china_document()), jobs=50, hours=2, seed=4
    )

    assert (
        main(
            ["trace", "synthetic", "--jobs", "5", "--hours", "1", "--out", str(tmp_path / "t.txt")]
        )
        == 2
    )
    assert "unknown trace format" in capsys.readouterr().err
