"""Where a lab's plan is kept while it is up: `<directory>/<name>.json` (mode 0600), written
by `cnbrain netlab up` and read by `netlab down`, `netlab link` and every brain that steers
onto the lab, so that all of them act on the lab as it was built.

The directory is root's and private (mode 0700): `write` creates it so, and both `write` and
`read` refuse one that is not, since what a manifest names reaches netlink and `nft` run as
root. A manifest read is held to the plan's field kinds (`plan.LabPlan`).
"""

import os
import stat
from pathlib import Path

from pydantic import ValidationError

from cnbrain.dataplane.plan import LabPlan, check_lab_name
from cnbrain.domain.errors import Unavailable

DIRECTORY = Path(os.environ.get("CNBRAIN_NETLAB_DIR", "/run/cnbrain/netlab"))
"""The manifests' directory (`CNBRAIN_NETLAB_DIR`, default /run/cnbrain/netlab)."""


class ManifestError(Unavailable):
    """A manifest that cannot be kept or read; the message names the file and says why."""


def path_of(name: str, directory: Path = DIRECTORY) -> Path:
    return directory / f"{check_lab_name(name)}.json"


def write(plan: LabPlan, directory: Path = DIRECTORY) -> Path:
    """Keep `plan` as its lab's manifest (replacing the file whole); the file. ManifestError
    when the directory is not root's and private, or the file cannot be written."""
    path = path_of(plan.name, directory)
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        _check_private(directory)
        temporary = path.with_suffix(".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(plan.model_dump_json())
        temporary.replace(path)
    except OSError as error:
        raise ManifestError(f"keeping the manifest of netlab {plan.name!r}: {error}") from error
    return path


def read(name: str, directory: Path = DIRECTORY) -> LabPlan | None:
    """The plan of lab `name` while it is up, or None. ManifestError when the directory is
    not root's and private, or the file cannot be read or is not a plan."""
    path = path_of(name, directory)
    try:
        _check_private(directory)
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ManifestError(f"reading the manifest {path}: {error}") from error
    try:
        return LabPlan.model_validate_json(text)
    except ValidationError as error:
        said = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()[:3])
        raise ManifestError(f"{path} is not a netlab's plan: {said}") from error


def generation(name: str, directory: Path = DIRECTORY) -> str | None:
    """An id of lab `name`'s manifest as last written: every `write` (a lab brought up again)
    gives another; None when the lab is not up."""
    try:
        found = path_of(name, directory).stat()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ManifestError(f"reading the manifest of netlab {name!r}: {error}") from error
    return f"{found.st_ino}-{found.st_mtime_ns}"


def remove(name: str, directory: Path = DIRECTORY) -> None:
    """Forget lab `name`'s manifest (none: nothing)."""
    path_of(name, directory).unlink(missing_ok=True)


def _check_private(directory: Path) -> None:
    """PermissionError unless `directory` is root's and only root may enter it;
    FileNotFoundError when it does not exist."""
    found = directory.stat()
    mode = stat.S_IMODE(found.st_mode)
    if found.st_uid != 0 or mode & 0o077 or not stat.S_ISDIR(found.st_mode):
        raise PermissionError(
            f"{directory} must be a directory of root's with mode 0700 "
            f"(it is uid {found.st_uid}'s, mode {mode:o})"
        )
