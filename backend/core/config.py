"""The backend's one typed settings object (env vars prefixed ``INFERSCALE_`` or bare names)."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PLACEHOLDER_SECRETS = frozenset({"", "changeme", "change-me", "dev-admin-key", "secret"})


class Settings(BaseSettings):
    """Everything the API, the worker and the migrations need, with local defaults that work."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    environment: Literal["dev", "test", "prod"] = Field(
        default="dev", validation_alias="INFERSCALE_ENV"
    )
    database_url: str = Field(
        default="postgresql+psycopg://postgres@127.0.0.1:5432/inferscale",
        validation_alias="DATABASE_URL",
    )
    redis_url: str = Field(default="redis://127.0.0.1:6379/0", validation_alias="REDIS_URL")
    admin_api_key: str = Field(default="dev-admin-key", validation_alias="INFERSCALE_ADMIN_KEY")
    api_key_pepper: str = Field(default="changeme", validation_alias="INFERSCALE_KEY_PEPPER")

    @model_validator(mode="after")
    def _refuse_placeholder_secrets(self) -> Settings:
        # A dev default that reaches production is a breach waiting to happen: refuse to start.
        if self.environment == "prod":
            weak = [
                name
                for name in ("admin_api_key", "api_key_pepper")
                if getattr(self, name) in PLACEHOLDER_SECRETS or len(getattr(self, name)) < 16
            ]
            if weak:
                raise ValueError(
                    f"refusing to start in prod with placeholder secrets: {', '.join(weak)}"
                )
        return self


@lru_cache
def get_settings() -> Settings:
    return Settings()
