"""SQLite databases are private from their first byte: the file 0600 (its journal files too),
its missing folders 0700, whatever the umask."""

from pathlib import Path

import pytest
from sqlalchemy import text

from cnbrain.private_files import make_private_folder
from cnbrain.storage.database import create_engine, upgrade_schema

pytestmark = pytest.mark.asyncio


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.usefixtures("no_umask")
async def test_a_new_sqlite_database_and_its_folders_are_private(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    path = tmp_path / "state" / "brains" / "regional.db"
    await upgrade_schema(f"sqlite:///{path}")
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700 and mode(path.parent.parent) == 0o700
    assert mode(tmp_path) == 0o755  # a folder that existed keeps its mode
    engine = create_engine(f"sqlite:///{path}")
    try:
        async with engine.begin() as connection:
            await connection.execute(text("CREATE TABLE t (x TEXT)"))
            await connection.execute(text("INSERT INTO t VALUES ('secret')"))
        async with engine.connect() as connection:
            await connection.execute(text("SELECT x FROM t"))
            companions = [Path(f"{path}{suffix}") for suffix in ("-wal", "-shm")]
            assert all(p.exists() for p in companions)
            assert [mode(p) for p in companions] == [0o600, 0o600]
    finally:
        await engine.dispose()


async def test_an_existing_database_others_could_read_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    await upgrade_schema(f"sqlite:///{path}")
    for file in (path, Path(f"{path}-wal")):
        file.touch()
        file.chmod(0o644)
    engine = create_engine(f"sqlite:///{path}")  # before SQLite opens it
    try:
        assert mode(path) == 0o600 and mode(Path(f"{path}-wal")) == 0o600
    finally:
        await engine.dispose()


@pytest.mark.usefixtures("no_umask")
async def test_private_folders_are_made_with_their_parents(tmp_path: Path) -> None:
    make_private_folder(tmp_path / "a" / "b")
    make_private_folder(tmp_path / "a" / "b")  # there already: nothing to do
    assert mode(tmp_path / "a") == 0o700 and mode(tmp_path / "a" / "b") == 0o700
