"""Settings every brain shares: its database, map, gRPC address and peer security.

From the environment (CNBRAIN_*) and an optional YAML file named by CNBRAIN_CONFIG_FILE;
environment variables override the file, which overrides the defaults.
"""

import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
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
    otlp_endpoint: str | None = Field(
        default=None,
        max_length=2048,
        description="Base URL of an OpenTelemetry collector (http://host:4318): this brain "
        "traces the calls it handles and sends the spans there over OTLP/HTTP; None: the "
        "standard OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing (docs/federation.md, Traces).",
    )
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
    metrics_max_age_s: float = Field(
        default=7.5,
        ge=0,
        le=3600,
        description="How long what a scrape of the metrics read from the database serves "
        "the next scrapes (about half of Prometheus's scrape interval); 0: every scrape "
        "reads (federation.scrape_reads).",
    )
    metrics_read_timeout_s: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="How long a scrape waits for each of its reads of the database; one "
        "that takes longer counts as the database being down (its series keep their last "
        "values).",
    )
    steering: Literal["off", "netlab"] = Field(
        default="off",
        description="Where this brain steers its segments of the paths it reserves: nowhere "
        "(it still re-routes reservations off links its operators report down), or onto the "
        "netlab named by `netlab` (docs/dataplane.md).",
    )
    netlab: str = Field(
        default="cnl",
        pattern=r"^[a-z][a-z0-9]{0,7}$",
        description="The netlab `steering = netlab` steers onto (`cnbrain netlab up --name`).",
    )
    resteer_interval_s: float = Field(
        default=1.0,
        ge=0.1,
        le=3600,
        description="How often a brain checks the links of the paths it holds (the netlab's "
        "when it steers, and its operators' reports) and re-routes the reservations over a "
        "link that went down.",
    )

    @field_validator("otlp_endpoint")
    @classmethod
    def _otlp_endpoint(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        url = urlsplit(value.strip())
        if url.scheme not in ("http", "https") or not url.hostname or url.query or url.fragment:
            raise ValueError("must be an http:// or https:// URL of a collector, without query")
        return value.strip()

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
