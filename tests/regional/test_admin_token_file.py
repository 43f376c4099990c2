"""The first admin's key file is private from its first byte, and a start that cannot write
it stores no admin, so the next start writes one."""

import os
from pathlib import Path
from typing import Any

import pytest

from cnbrain.regional.composition import running
from cnbrain.storage import tenants
from tests.regional.brain_api import ADMIN_TOKEN, brain_settings

pytestmark = pytest.mark.asyncio


@pytest.mark.usefixtures("no_umask")
async def test_the_admin_token_file_is_created_0600_and_never_written_at_another_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = brain_settings(f"sqlite:///{tmp_path / 'brain.db'}", None, tmp_path)
    token_file = settings.admin_token_file
    token_file.write_text("left over\n")
    token_file.chmod(0o644)
    opened: list[tuple[int, int]] = []
    real_open = os.open

    def spy(path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        if Path(path) == token_file:
            opened.append((flags, mode))
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    async with running(settings):
        pass
    # written through a descriptor created 0600; an existing file is set to 0600 (fchmod)
    # before it is truncated, so the key is never in a file of another mode
    assert opened and all(flags & os.O_CREAT and mode == 0o600 for flags, mode in opened)
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert token_file.read_text() == ADMIN_TOKEN + "\n"


async def test_a_start_that_cannot_write_the_admin_token_stores_no_admin(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'brain.db'}"
    blocked = brain_settings(url, None, tmp_path).model_copy(
        update={"admin_token_file": tmp_path / "no-such-folder" / "admin.token"}
    )
    with pytest.raises(FileNotFoundError):
        async with running(blocked):
            pass
    settings = brain_settings(url, None, tmp_path)
    async with running(settings) as brain, brain.sessions() as session:
        assert await tenants.authenticate(session, token=ADMIN_TOKEN) is not None
    assert settings.admin_token_file.read_text() == ADMIN_TOKEN + "\n"
