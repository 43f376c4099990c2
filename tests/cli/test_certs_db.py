"""`cnbrain certs` and `cnbrain db upgrade` as commands."""

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, inspect

from cnbrain.cli.main import main
from cnbrain.storage.database import create_engine
from tests.databases import create_postgres_database, drop_postgres_database


def test_certs_writes_the_names_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "--out", str(tmp_path), "--names", "national,east", "--days", "3"]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {
        "ca.pem",
        "ca-key.pem",
        "national.pem",
        "national-key.pem",
        "east.pem",
        "east-key.pem",
    }
    out = capsys.readouterr().out
    assert "wrote CA" in out and "wrote east" in out


def test_certs_defaults_to_the_national_brain_and_the_four_regions(tmp_path: Path) -> None:
    assert main(["certs", "--out", str(tmp_path)]) == 0
    certificates = {p.name for p in tmp_path.glob("*.pem") if not p.name.endswith("-key.pem")}
    assert certificates == {
        "ca.pem",
        "national.pem",
        "east.pem",
        "west.pem",
        "north.pem",
        "south.pem",
    }


def test_certs_reports_a_bad_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "--out", str(tmp_path), "--names", "Bad Name"]) == 2
    assert "bad name" in capsys.readouterr().err


async def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return set(await connection.run_sync(_table_names))
    finally:
        await engine.dispose()


def _table_names(connection: Connection) -> list[str]:
    return inspect(connection).get_table_names()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    url = asyncio.run(create_postgres_database("cnbrain_cli_db"))
    yield url
    asyncio.run(drop_postgres_database(url))


def _cnbrain(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cnbrain.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_db_upgrade_migrates_a_postgres_database(postgres_url: str) -> None:
    done = _cnbrain("db", "upgrade", "--database-url", postgres_url)
    assert done.returncode == 0, done.stderr
    assert "upgraded to head" in done.stdout
    assert {"alembic_version", "sites", "placement_requests"} <= asyncio.run(_tables(postgres_url))
    again = _cnbrain("db", "upgrade", "--database-url", postgres_url)
    assert again.returncode == 0, again.stderr


def test_db_upgrade_reads_the_url_from_the_environment(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'brain.db'}"
    done = _cnbrain("db", "upgrade", env={"CNBRAIN_DATABASE_URL": url})
    assert done.returncode == 0, done.stderr
    assert "alembic_version" in asyncio.run(_tables(url))


def test_db_upgrade_without_a_url_says_what_is_missing() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CNBRAIN_DATABASE_URL"}
    done = subprocess.run(
        [sys.executable, "-m", "cnbrain.cli.main", "db", "upgrade"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 2
    assert "CNBRAIN_DATABASE_URL" in done.stderr
