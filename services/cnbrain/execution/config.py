"""The factory of a site's backend: `backend_for` builds the scheduler a `BackendRef` names.

`BackendRef` itself is a value of the map (`cnbrain.domain.backend_ref`).
"""

from cnbrain.domain.backend_ref import BackendRef
from cnbrain.execution.backend import ClusterBackend
from cnbrain.execution.clock import Clock
from cnbrain.execution.credentials import CredentialStore
from cnbrain.execution.simulator import SimulatedBackend
from cnbrain.execution.slurm import SlurmBackend


def backend_for(
    ref: BackendRef,
    *,
    clock: Clock | None = None,
    credentials: CredentialStore | None = None,
) -> ClusterBackend:
    """The backend `ref` names, ready to use (nothing is contacted until the first call).

    `clock` is the simulator's clock (the system's by default); a Slurm backend ignores it.
    A Slurm backend reads its token from `credentials` (none: an empty store) at each call,
    and each call raises `BackendUnavailable` without sending anything when the store lacks
    `ref.credential` or that credential is not for `ref.url`.
    The caller owns the backend and closes it with `aclose()`.
    """
    if ref.kind == "simulator":
        return SimulatedBackend(
            clock=clock, time_scale=ref.time_scale, queue_delay_s=ref.queue_delay_s
        )
    # the validator guarantees them
    assert ref.url is not None and ref.user is not None and ref.credential is not None
    store = credentials or CredentialStore()
    return SlurmBackend(
        url=str(ref.url),
        user=ref.user,
        token=store.token_source(ref.credential, str(ref.url)),
        timeout_s=ref.timeout_s,
        partition=ref.partition,
        account=ref.account,
        gpu_types=ref.gpu_types,
        gpu_shards=ref.gpu_shards,
    )
