"""`cnbrain netlab up`, `link` and `down` on a map file, as an operator runs them."""

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cnbrain.dataplane import linux, manifest
from cnbrain.netmap.document import MapDocument
from cnbrain.netmap.files import write_map_document
from tests.tiny_map import tiny_map_raw

LAB = "cnlc"


def cnbrain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cnbrain.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,
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
    unknown = cnbrain("netlab", "link", "down", "AA-gw", "CC-hub", "--name", LAB)
    assert unknown.returncode == 2
    assert "no link between 'AA-gw' and 'CC-hub'" in unknown.stderr

    gone = cnbrain("netlab", "down", "--name", LAB)
    assert gone.returncode == 0, gone.stderr
    assert linux.lab_namespaces(LAB) == []
    assert manifest.read(LAB) is None
