"""Execution: handing placed jobs to a site's cluster scheduler and following them there.

The contract is `ClusterBackend` (`cnbrain.execution.backend`); a site names its backend with
a `BackendRef` (a value of the map, `cnbrain.domain.backend_ref`) and
`backend_for(ref, credentials=store)` builds it: `SlurmBackend` (slurmrestd, JWT, its token
from the brain's `CredentialStore`) or `SimulatedBackend` (a simulator, for sites without a
real scheduler). See docs/execution.md.
"""

from cnbrain.execution.backend import ClusterBackend
from cnbrain.execution.clock import Clock, ManualClock, SystemClock
from cnbrain.execution.config import backend_for
from cnbrain.execution.credentials import (
    Credential,
    CredentialRefusedError,
    CredentialStore,
    TokenSource,
    token_from_file,
)
from cnbrain.execution.errors import BackendError, BackendRejected, BackendUnavailable, UnknownJob
from cnbrain.execution.jobs import JobAccounting, JobSpec, JobState, JobStatus, NodeReport
from cnbrain.execution.simulator import SimulatedBackend
from cnbrain.execution.slurm import SlurmBackend

__all__ = [
    "BackendError",
    "BackendRejected",
    "BackendUnavailable",
    "Clock",
    "ClusterBackend",
    "Credential",
    "CredentialRefusedError",
    "CredentialStore",
    "JobAccounting",
    "JobSpec",
    "JobState",
    "JobStatus",
    "ManualClock",
    "NodeReport",
    "SimulatedBackend",
    "SlurmBackend",
    "SystemClock",
    "TokenSource",
    "UnknownJob",
    "backend_for",
    "token_from_file",
]
