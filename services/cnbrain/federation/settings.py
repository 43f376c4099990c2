"""Settings every brain shares: its database, map, gRPC address and peer security.

From the environment (CNBRAIN_*) and an optional YAML file named by CNBRAIN_CONFIG_FILE;
environment variables override the file, which overrides the defaults.
"""

import os
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from cnbrain.rpc.security import PeerSecurity


class BrainSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CNBRAIN_", extra="forbid")

    map: str = Field(default="china", description="Map loaded into an empty database.")
    grpc_host: str = "127.0.0.1"
    grpc_port: int | None = Field(
        default=None, ge=0, le=65535, description="None: no gRPC server (a standalone brain)."
    )
    peer_token: SecretStr | None = Field(
        default=None, description="Shared token brains present to each other."
    )
    tls_dir: Path | None = Field(
        default=None,
        description="Directory written by `cnbrain certs`: TLS with client certificates.",
    )
    call_deadline_s: float = Field(default=2.0, gt=0, description="Deadline of a call to a peer.")
    audit_interval_s: float = Field(
        default=60.0,
        ge=0.1,
        le=3600,
        description="How often the ledger auditor checks this brain's ledger.",
    )
    audit_grace_s: float = Field(
        default=300.0,
        gt=0,
        le=86_400,
        description="How long a reservation or part the auditor finds orphaned stays so "
        "before the auditor releases it.",
    )

    def security(self, name: str) -> PeerSecurity:
        """This brain's peer security; `name` picks its certificate in `tls_dir`."""
        token = self.peer_token.get_secret_value() if self.peer_token else None
        if self.tls_dir is None:
            return PeerSecurity(token=token)
        return PeerSecurity.from_dir(self.tls_dir, name, token=token)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get("CNBRAIN_CONFIG_FILE")
        if config_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        return tuple(sources)
