"""Where the command line finds a brain and its key: --url/--token, then the environment,
then the context `cnbrain up` writes, then the defaults; a context that cannot be read is a
clean error naming the file."""

import argparse
import json
from pathlib import Path

import pytest

from cnbrain.cli.context import write_context
from cnbrain.cli.rest import DEFAULT_URL, BrainCallError, token_of, url_of


def _args(url: str | None = None, token: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(url=url, token=token)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory and an environment without the CLI's variables."""
    monkeypatch.chdir(tmp_path)
    for name in ("CNBRAIN_URL", "CNBRAIN_TOKEN", "CNBRAIN_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_the_context_of_up_is_read_where_up_ran(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(BrainCallError, match="no API key"):
        token_of(_args())
    assert url_of(_args()) == DEFAULT_URL
    (here / "cnbrain-admin.token").write_text("ck_standalone\n")
    assert token_of(_args()) == "ck_standalone"

    data = here / ".cnbrain"
    data.mkdir()
    (data / "admin.token").write_text("ck_federation\n")
    path = write_context(
        data,
        urls={"east": "http://127.0.0.1:8081", "west": "http://127.0.0.1:8084"},
        token_file=data / "admin.token",
    )
    assert path.stat().st_mode & 0o777 == 0o600
    assert "ck_federation" not in path.read_text()  # the key stays in its own file
    assert (url_of(_args()), token_of(_args())) == ("http://127.0.0.1:8081", "ck_federation")

    monkeypatch.setenv("CNBRAIN_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("CNBRAIN_TOKEN", "ck_environment")
    assert (url_of(_args()), token_of(_args())) == ("http://127.0.0.1:9000", "ck_environment")
    given = _args("http://127.0.0.1:9001", "ck_flag")
    assert (url_of(given), token_of(given)) == ("http://127.0.0.1:9001", "ck_flag")


def test_a_context_elsewhere_is_named_by_the_environment(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = here / "key"
    key.write_text("ck_elsewhere")
    write_context(here, urls={"north": "http://127.0.0.1:8082"}, token_file=key)
    monkeypatch.setenv("CNBRAIN_CONTEXT", str(here / "context.json"))
    assert (url_of(_args()), token_of(_args())) == ("http://127.0.0.1:8082", "ck_elsewhere")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{not json", "cannot read the context"),
        (json.dumps({"url": "http://x"}), "not one `cnbrain up` writes"),
        (json.dumps({"url": 1, "urls": {}, "token_file": "k"}), "must be text"),
        (json.dumps([1, 2]), "not one `cnbrain up` writes"),
    ],
)
def test_a_broken_context_is_a_clean_error_naming_the_file(
    here: Path, monkeypatch: pytest.MonkeyPatch, text: str, words: str
) -> None:
    path = here / "broken.json"
    path.write_text(text)
    monkeypatch.setenv("CNBRAIN_CONTEXT", str(path))
    with pytest.raises(BrainCallError, match=words) as raised:
        url_of(_args())
    assert str(path) in str(raised.value)
