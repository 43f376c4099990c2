"""Settings of a regional brain, from the environment (CNBRAIN_*) and an optional YAML file."""

import os
import socket
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)


class Settings(BaseSettings):
    """Environment variables override the file named by CNBRAIN_CONFIG_FILE, which overrides
    the defaults. The defaults are the embedded first run: SQLite file, in-process cache."""

    model_config = SettingsConfigDict(env_prefix="CNBRAIN_", extra="forbid")

    database_url: str = "sqlite+aiosqlite:///cnbrain-regional.db"
    redis_url: str | None = Field(default=None, description="None: in-process cache (one replica).")
    map: str = Field(default="china", description="Map loaded into an empty database.")
    instance_id: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    rate_limit_per_minute: int = Field(default=6000, ge=1)
    idempotency_ttl_s: int = Field(default=86_400, ge=60)
    placement_attempts: int = Field(
        default=5, ge=1, description="Plans tried per request under contention."
    )
    admin_token_file: Path = Field(
        default=Path("cnbrain-admin.token"),
        description="Where the first start writes the admin's API key.",
    )
    admin_token: SecretStr | None = Field(
        default=None, description="Admin API key to install on first start instead of a new one."
    )
    bus_namespace: str = Field(
        default="default", description="Replicas sharing a database share this."
    )

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
