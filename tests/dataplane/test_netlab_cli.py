"""`cnbrain netlab up`, `link`, `hops`, `down` and `bench` on a map file, as an operator runs
them; a lab whose manifest cannot be kept, or whose build is interrupted, is not left half
built, and a manifest is read only from root's private directory and only when every field
is of its kind."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cnbrain.cli.netlab import BENCH_LAB
from cnbrain.dataplane import linux, manifest
from cnbrain.dataplane.plan import plan_lab
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.document import MapDocument
from cnbrain.netmap.files import write_map_document
from tests.tiny_map import tiny_map_raw

pytestmark = pytest.mark.usefixtures("lab_tools")

LAB = "cnlc"


def cnbrain(*args: str, netlab_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if netlab_dir is not None:
        env["CNBRAIN_NETLAB_DIR"] = str(netlab_dir)
    return subprocess.run(
        [sys.executable, "-m", "cnbrain.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.fixture
def map_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "tiny.yaml"
    write_map_document(MapDocument.model_validate(tiny_map_raw()), path)
    try:
        yield path
    finally:
        linux.destroy(LAB)
        manifest.remove(LAB)


def test_up_link_down_and_down(map_file: Path) -> None:
    up = cnbrain("netlab", "up", "--map", str(map_file), "--part", "provinces=AA,BB", "--name", LAB)
    assert up.returncode == 0, up.stderr
    assert "provinces AA,BB" in up.stdout
    plan = manifest.read(LAB)
    assert plan is not None
    assert set(linux.lab_namespaces(LAB)) == {h.namespace for h in plan.hosts}
    assert f"{LAB}-CC-gw" in linux.lab_namespaces(LAB)
    assert f"{LAB}-CC-hub" not in linux.lab_namespaces(LAB)

    again = cnbrain("netlab", "up", "--map", str(map_file), "--name", LAB)
    assert again.returncode == 2
    assert "is up already" in again.stderr

    down = cnbrain("netlab", "link", "down", "BB-gw", "AA-gw", "--name", LAB)
    assert down.returncode == 0, down.stderr
    assert linux.links_down(plan, ["AA-gw--BB-gw", "BB-gw--CC-gw"]) == {"AA-gw--BB-gw"}
    assert cnbrain("netlab", "link", "up", "AA-gw", "BB-gw", "--name", LAB).returncode == 0
    assert linux.links_down(plan, ["AA-gw--BB-gw"]) == set()
    hops = cnbrain("netlab", "hops", "--name", LAB)
    assert hops.returncode == 0, hops.stderr
    assert hops.stdout.split() == ["NODE", "LINK", "PACKETS"]  # no traffic yet
    unknown = cnbrain("netlab", "link", "down", "AA-gw", "CC-hub", "--name", LAB)
    assert unknown.returncode == 2
    assert "no link between 'AA-gw' and 'CC-hub'" in unknown.stderr

    gone = cnbrain("netlab", "down", "--name", LAB)
    assert gone.returncode == 0, gone.stderr
    assert linux.lab_namespaces(LAB) == []
    assert manifest.read(LAB) is None


def test_a_lab_whose_manifest_cannot_be_kept_is_removed(map_file: Path, tmp_path: Path) -> None:
    shared = tmp_path / "netlab"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)

    up = cnbrain("netlab", "up", "--map", str(map_file), "--name", LAB, netlab_dir=shared)

    assert up.returncode == 2
    assert "must be a directory of root's with mode 0700" in up.stderr
    assert "Traceback" not in up.stderr
    assert linux.lab_namespaces(LAB) == []
    assert list(shared.iterdir()) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_build_leaves_no_lab(signum: signal.Signals) -> None:
    lab = "cnli"
    up = ["netlab", "up", "--map", "china", "--part", "provinces=ZJ,SH,NX", "--name", lab]
    build = subprocess.Popen(
        [sys.executable, "-m", "cnbrain.cli.main", *up],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not linux.lab_namespaces(lab):
            assert build.poll() is None, build.communicate()
            assert time.monotonic() < deadline, "no namespace of the lab within 60 s"
            time.sleep(0.02)
        build.send_signal(signum)
        _, stderr = build.communicate(timeout=120)

        assert build.returncode == 130, stderr
        assert "Traceback" not in stderr, stderr
        assert linux.lab_namespaces(lab) == []
        assert manifest.read(lab) is None
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
        linux.destroy(lab)
        manifest.remove(lab)


def test_a_manifest_is_read_only_when_private_and_of_its_kinds(
    tiny_map: ComputeNetworkMap, tmp_path: Path
) -> None:
    private = tmp_path / "private"
    plan = plan_lab(tiny_map, name=LAB)
    manifest.write(plan, private)
    assert oct(private.stat().st_mode & 0o777) == "0o700"
    assert manifest.read(LAB, private) == plan

    path = manifest.path_of(LAB, private)
    wire = plan.wires[0]
    hostile = plan.model_copy(
        update={"wires": (wire.model_copy(update={"a_interface": 'x" flush ruleset'}),)}
    )
    path.write_text(hostile.model_dump_json())
    with pytest.raises(manifest.ManifestError, match="a_interface"):
        manifest.read(LAB, private)

    private.chmod(0o755)
    with pytest.raises(manifest.ManifestError, match="mode 0700"):
        manifest.read(LAB, private)


def test_bench_prints_its_figures_and_leaves_no_lab(map_file: Path) -> None:
    bench = cnbrain(
        "netlab", "bench", "--map", str(map_file), "--part", "provinces=AA,CC", "--paths", "5"
    )

    assert bench.returncode == 0, bench.stderr
    assert "install a path: p50" in bench.stdout
    assert "routes installed per second" in bench.stdout
    assert linux.lab_namespaces(BENCH_LAB) == []
    assert manifest.read(BENCH_LAB) is None
