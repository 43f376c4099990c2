"""Where a lab's plan is kept while it is up: `<directory>/<name>.json` (mode 0600), written
by `cnbrain netlab up` and read by `netlab down`, `netlab link` and every brain that steers
onto the lab, so that all of them act on the lab as it was built."""

import os
from pathlib import Path

from cnbrain.dataplane.plan import LabPlan, check_lab_name

DIRECTORY = Path(os.environ.get("CNBRAIN_NETLAB_DIR", "/run/cnbrain/netlab"))
"""The manifests' directory (`CNBRAIN_NETLAB_DIR`, default /run/cnbrain/netlab)."""


def path_of(name: str, directory: Path = DIRECTORY) -> Path:
    return directory / f"{check_lab_name(name)}.json"


def write(plan: LabPlan, directory: Path = DIRECTORY) -> Path:
    """Keep `plan` as its lab's manifest; the file."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = path_of(plan.name, directory)
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(plan.model_dump_json())
    temporary.replace(path)
    return path


def read(name: str, directory: Path = DIRECTORY) -> LabPlan | None:
    """The plan of lab `name` while it is up, or None."""
    path = path_of(name, directory)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return LabPlan.model_validate_json(text)


def remove(name: str, directory: Path = DIRECTORY) -> None:
    """Forget lab `name`'s manifest (none: nothing)."""
    path_of(name, directory).unlink(missing_ok=True)
