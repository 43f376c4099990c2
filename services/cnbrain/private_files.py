"""Files and folders only their owner may read: keys, tokens and databases.

Each is private from its first byte: files are created with mode 0600 and folders with 0700
(the process's umask can only take more away), never written first and restricted after.
"""

import contextlib
import logging
import os
from pathlib import Path

log = logging.getLogger("cnbrain")

FILE_MODE = 0o600
FOLDER_MODE = 0o700


def write_private(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path`, readable and writable by its owner only.

    A new file is created with mode 0600; an existing one is set to 0600 before it is
    truncated and written, so its old mode never shows the new text.
    """
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
    with os.fdopen(descriptor, "wb") as file:
        os.fchmod(descriptor, FILE_MODE)
        file.truncate()
        file.write(text.encode("utf-8"))


def make_private_folder(path: Path) -> None:
    """Create `path` and its missing parents with mode 0700. Existing folders keep their mode
    (they may be shared, such as the working directory)."""
    missing = [folder for folder in (path, *path.parents) if not folder.exists()]
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            folder.mkdir(mode=FOLDER_MODE)


def create_private_file(path: Path) -> None:
    """Make sure `path` exists and is readable and writable by its owner only: a new file (in a
    folder made by `make_private_folder` when missing) is created empty with mode 0600; an
    existing one is set to 0600, and so are its companions `<path>-wal`, `<path>-shm` and
    `<path>-journal` if present (a database's journal files, which otherwise keep the mode
    they were made with). An existing file of another owner keeps its mode, with a warning.
    """
    make_private_folder(path.parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:
        for existing in (path, *(Path(f"{path}{suffix}") for suffix in _COMPANIONS)):
            _restrict(existing)


def _restrict(path: Path) -> None:
    try:
        if path.stat().st_mode & 0o777 != FILE_MODE:
            path.chmod(FILE_MODE)
    except FileNotFoundError:
        pass
    except PermissionError:
        log.warning("%s is not ours: it keeps its mode, which others may read", path)


_COMPANIONS = ("-wal", "-shm", "-journal")
