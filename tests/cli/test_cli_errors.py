"""The command line fails cleanly: one line on standard error and exit status 2, no
traceback; a usage error does not echo a key given on the command line; a reader that goes
away (`| head`) is no error; `--version` says the version."""

import io
import os
from pathlib import Path

import pytest

from cnbrain import __version__
from cnbrain.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def test_a_request_file_that_is_missing_or_not_json_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"source_province": "ZJ",\n  oops}')
    for path, words in (
        (broken, f"cnbrain: {broken} is not JSON: line 2, column 3: "),
        (tmp_path / "missing.json", f"cnbrain: cannot read {tmp_path / 'missing.json'}: "),
    ):
        assert main(["submit", str(path), "--token", "ck_x", "--url", "http://127.0.0.1:9"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(words) and "Traceback" not in err, err


@pytest.mark.parametrize(
    "mistyped",
    [
        ["--tokne", "ck_live.secretvalue"],
        ["--tokne=hunter2hunter2"],
        ["--api-key", "plainsecret"],
        ["ck_live.secretvalue"],
    ],
)
def test_a_usage_error_does_not_echo_a_key(
    mistyped: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["requests", "list", *mistyped])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "unrecognized arguments" in err
    for secret in ("ck_live.secretvalue", "hunter2hunter2", "plainsecret"):
        assert secret not in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out == f"cnbrain {__version__}\n"


def test_a_reader_that_goes_away_is_no_error(monkeypatch: pytest.MonkeyPatch) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone: writing raises BrokenPipeError
    out = io.TextIOWrapper(os.fdopen(write, "wb", buffering=0), write_through=True)
    monkeypatch.setattr("sys.stdout", out)
    request = str(ROOT / "examples/requests/gpu-training.json")
    assert main(["place", "--map", "china", "--request", request, "--explain"]) == 0
