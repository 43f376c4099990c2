"""A brain logs one record a line naming itself, its region and the current request id: JSON
lines for collectors, plain text in a terminal."""

import io
import json
import logging
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cnbrain.cli.logs import configure_logging
from cnbrain.rpc.context import request_id_scope


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def restored() -> Iterator[None]:
    """The root logger's handlers and level, as they were before the test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_name_the_brain_its_region_and_the_request(restored: None) -> None:
    out = io.StringIO()
    configure_logging(brain="regional", region="east", level="info", stream=out)
    log = logging.getLogger("cnbrain.test")
    log.debug("not at info")
    with request_id_scope("req-42"):
        log.info("placed %s", "r-1")
    try:
        raise ValueError("broken")
    except ValueError:
        log.exception("failed")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert {k: first[k] for k in ("level", "logger", "message", "brain", "region")} == {
        "level": "info",
        "logger": "cnbrain.test",
        "message": "placed r-1",
        "brain": "regional",
        "region": "east",
    }
    assert first["request_id"] == "req-42" and first["at"].endswith("+00:00")
    assert second["request_id"] == "-" and "ValueError: broken" in second["error"]


def test_a_terminal_gets_plain_text(restored: None) -> None:
    out = _Terminal()
    configure_logging(brain="national", region=None, level="warning", stream=out)
    with request_id_scope("req-7"):
        logging.getLogger("cnbrain.test").warning("region %s is down", "west")
    [line] = out.getvalue().splitlines()
    assert line.endswith("WARNING national cnbrain.test [req-7] region west is down"), line


def test_a_national_brain_process_writes_json_lines(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    database = f"sqlite+aiosqlite:///{tmp_path / 'national.db'}"
    command = ["brain", "national", "--database-url", database, "--grpc-port", str(port)]
    process = subprocess.Popen(
        [sys.executable, "-m", "cnbrain.cli.main", *command],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines = []
    try:
        assert process.stderr is not None
        for raw in process.stderr:
            lines.append(json.loads(raw))
            if "gRPC on" in lines[-1]["message"]:
                break
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert any("loaded map china" in line["message"] for line in lines), lines
    assert all(line["brain"] == "national" and line["region"] == "-" for line in lines)
