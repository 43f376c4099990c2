"""The requests the README places on the built-in map are placed."""

import json
import re
from pathlib import Path

import pytest

from cnbrain.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
PLACED = re.findall(
    r"cnbrain place --map china --request (\S+\.json)", (ROOT / "README.md").read_text()
)


def test_the_readme_places_requests() -> None:
    assert "examples/requests/gpu-memory-inference.json" in PLACED


@pytest.mark.parametrize("request_file", PLACED)
def test_a_readme_request_is_placed(request_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["place", "--map", "china", "--request", str(ROOT / request_file)]) == 0
    decision = json.loads(capsys.readouterr().out)
    assert decision["status"] == "placed", decision
