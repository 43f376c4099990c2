"""How a site names its scheduler (`BackendRef`), and the factory that builds it (`backend_for`).

A `BackendRef` holds no secret, nor where one is: a Slurm site names a credential of the
brain's `CredentialStore`, which the deployment configures and which sends its token only to
the URL it is for.

    {"kind": "slurm", "url": "http://127.0.0.1:6820", "user": "cnbrain-slurm",
     "credential": "local-slurm"}
    {"kind": "simulator", "time_scale": 60}
"""

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, model_validator

from cnbrain.execution.backend import ClusterBackend
from cnbrain.execution.clock import Clock
from cnbrain.execution.credentials import CREDENTIAL_NAME, CredentialStore
from cnbrain.execution.simulator import SimulatedBackend
from cnbrain.execution.slurm import SlurmBackend

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class BackendRef(BaseModel):
    """A site's cluster scheduler: what kind, where, as whom, and which credential.

    kind "slurm": `url` of slurmrestd, `user` (the Slurm user jobs run as), and `credential`,
    the name of the store's credential for that URL (a JWT for that user); optional
    `partition`, `account`,
    `gpu_types` (accelerator model name -> the site's GRES type name) and `timeout_s`.
    kind "simulator": only `time_scale` and `queue_delay_s` apply; the Slurm fields must be
    absent. Unknown fields are refused, so neither a secret nor where one is (a path, an
    environment variable) can be given.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["slurm", "simulator"]
    url: HttpUrl | None = None
    user: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_.-]{0,31}$")
    credential: str | None = Field(default=None, pattern=CREDENTIAL_NAME)
    partition: str | None = Field(default=None, pattern=_NAME)
    account: str | None = Field(default=None, pattern=_NAME)
    gpu_types: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=10.0, gt=0, le=300)
    time_scale: float = Field(default=1.0, gt=0)
    queue_delay_s: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> Self:
        slurm_only = ("url", "user", "credential", "partition", "account")
        if self.kind == "slurm":
            needed = ("url", "user", "credential")
            missing = [name for name in needed if getattr(self, name) is None]
            if missing:
                raise ValueError(f"a slurm backend needs {', '.join(missing)}")
        else:
            given = [name for name in slurm_only if getattr(self, name) is not None]
            if given or self.gpu_types:
                raise ValueError(f"a simulator takes no {', '.join(given) or 'gpu_types'}")
        return self


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
    )
