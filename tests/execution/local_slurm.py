"""The local Slurm of the execution tests (`scripts/slurm.sh`): where slurmrestd listens, the
user and token file a brain uses for it, and starting it."""

import subprocess
from pathlib import Path

import pytest

from cnbrain.execution import Credential, CredentialStore

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm.sh"
URL = "http://127.0.0.1:6820"
USER = "cnbrain-slurm"
TOKEN_FILE = Path("/run/cnbrain-slurm/token")
CREDENTIAL = "local-slurm"
CREDENTIALS: dict[str, dict[str, str]] = {CREDENTIAL: {"url": URL, "token_file": str(TOKEN_FILE)}}
"""A brain's credential store holding the local Slurm's token, as settings give it."""
SHARDS_PER_GPU = 100
"""The shards of each of its GPUs (the script's SLURM_SH_SHARDS default)."""


def credential_store() -> CredentialStore:
    """The store of `CREDENTIALS`."""
    return CredentialStore({n: Credential.model_validate(c) for n, c in CREDENTIALS.items()})


def start_slurm() -> None:
    """The local Slurm (`bash scripts/slurm.sh start`, idempotent); the test fails with the
    script's output when it cannot start."""
    try:
        result = subprocess.run(
            ["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=900
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`bash scripts/slurm.sh start` did not finish in 900 s: {exc}", pytrace=False)
    if result.returncode != 0:
        pytest.fail(
            f"the local Slurm is not available: `bash scripts/slurm.sh start` exited "
            f"{result.returncode}\n{result.stdout}{result.stderr}",
            pytrace=False,
        )
