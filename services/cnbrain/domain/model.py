"""Base model for every domain document: strict about unknown fields, immutable."""

from pydantic import BaseModel, ConfigDict


class DomainModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
