"""How a site names its cluster scheduler: a `BackendRef`, a plain value of the map.

A `BackendRef` holds no secret, nor where one is: a Slurm site names a credential of the
brain's credential store, which the deployment configures and which sends its token only to
the URL it is for. `cnbrain.execution.config.backend_for` builds the backend a ref names.

    {"kind": "slurm", "url": "http://127.0.0.1:6820", "user": "cnbrain-slurm",
     "credential": "local-slurm"}
    {"kind": "simulator", "time_scale": 60}
"""

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, model_validator

CREDENTIAL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
"""The pattern of a credential's name in a brain's store (1 to 64 letters, digits, `.`, `_`,
`-`)."""

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class BackendRef(BaseModel):
    """A site's cluster scheduler: what kind, where, as whom, and which credential.

    kind "slurm": `url` of slurmrestd, `user` (the Slurm user jobs run as), and `credential`,
    the name of the store's credential for that URL (a JWT for that user); optional
    `partition`, `account`,
    `gpu_types` (accelerator model name -> the site's GRES type name), `gpu_shards` (the
    shards of each GPU in the site's gres.conf: a job asking a fraction of a GPU gets its
    share of them; none: the site runs a fraction on a whole GPU) and `timeout_s`.
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
    gpu_shards: int | None = Field(default=None, strict=True, ge=1, le=1000)
    timeout_s: float = Field(default=10.0, gt=0, le=300)
    time_scale: float = Field(default=1.0, gt=0)
    queue_delay_s: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> Self:
        slurm_only = ("url", "user", "credential", "partition", "account", "gpu_shards")
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


SIMULATOR = BackendRef(kind="simulator")
"""The backend of a site that names none: a simulator (see docs/execution.md)."""
