"""How a site names its scheduler (`BackendRef`), and the factory that builds it (`backend_for`).

A `BackendRef` holds no secret: a Slurm site names where its token is (`token_file`, or the
environment variable `token_env`), read by the backend when it needs it.

    {"kind": "slurm", "url": "http://127.0.0.1:6820", "user": "cnbrain-slurm",
     "token_file": "/run/cnbrain-slurm/token"}
    {"kind": "simulator", "time_scale": 60}
"""

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, model_validator

from cnbrain.execution.backend import ClusterBackend
from cnbrain.execution.clock import Clock
from cnbrain.execution.credentials import token_from_env, token_from_file
from cnbrain.execution.simulator import SimulatedBackend
from cnbrain.execution.slurm import SlurmBackend

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class BackendRef(BaseModel):
    """A site's cluster scheduler: what kind, where, as whom, and where its credential is.

    kind "slurm": `url` of slurmrestd, `user` (the Slurm user jobs run as), and exactly one of
    `token_file` / `token_env` (a JWT for that user); optional `partition`, `account`,
    `gpu_types` (accelerator model name -> the site's GRES type name) and `timeout_s`.
    kind "simulator": only `time_scale` and `queue_delay_s` apply; the Slurm fields must be
    absent. Unknown fields are refused, so a secret cannot be given inline by mistake.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["slurm", "simulator"]
    url: HttpUrl | None = None
    user: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_.-]{0,31}$")
    token_file: str | None = Field(default=None, pattern=r"^/")
    token_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    partition: str | None = Field(default=None, pattern=_NAME)
    account: str | None = Field(default=None, pattern=_NAME)
    gpu_types: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=10.0, gt=0, le=300)
    time_scale: float = Field(default=1.0, gt=0)
    queue_delay_s: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> Self:
        slurm_only = ("url", "user", "token_file", "token_env", "partition", "account")
        if self.kind == "slurm":
            missing = [name for name in ("url", "user") if getattr(self, name) is None]
            if missing:
                raise ValueError(f"a slurm backend needs {' and '.join(missing)}")
            if (self.token_file is None) == (self.token_env is None):
                raise ValueError("a slurm backend needs exactly one of token_file and token_env")
        else:
            given = [name for name in slurm_only if getattr(self, name) is not None]
            if given or self.gpu_types:
                raise ValueError(f"a simulator takes no {', '.join(given) or 'gpu_types'}")
        return self


def backend_for(ref: BackendRef, *, clock: Clock | None = None) -> ClusterBackend:
    """The backend `ref` names, ready to use (nothing is contacted until the first call).

    `clock` is the simulator's clock (the system's by default); a Slurm backend ignores it.
    The caller owns the backend and closes it with `aclose()`.
    """
    if ref.kind == "simulator":
        return SimulatedBackend(
            clock=clock, time_scale=ref.time_scale, queue_delay_s=ref.queue_delay_s
        )
    assert ref.url is not None and ref.user is not None  # the validator guarantees them
    token = (
        token_from_file(ref.token_file) if ref.token_file else token_from_env(str(ref.token_env))
    )
    return SlurmBackend(
        url=str(ref.url),
        user=ref.user,
        token=token,
        timeout_s=ref.timeout_s,
        partition=ref.partition,
        account=ref.account,
        gpu_types=ref.gpu_types,
    )
