"""Runtime configuration: every ``OM_*`` environment variable is read here and nowhere else.

Each setting is one field of :class:`Settings` (``database_url`` <- ``OM_DATABASE_URL``); later
components add their own fields (``redis_url`` <- ``OM_REDIS_URL`` ...) next to these.
"""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///./om.db"


class Settings(BaseSettings):
    """Settings read from ``OM_*`` environment variables.

    Raises ``pydantic.ValidationError`` when a variable is set to a value of the wrong shape.
    """

    model_config = SettingsConfigDict(
        env_prefix="OM_",
        extra="ignore",
        frozen=True,
    )

    database_url: str = Field(
        default=DEFAULT_DATABASE_URL,
        min_length=1,
        description="SQLAlchemy URL of the session store; SQLite file by default, "
        "PostgreSQL as postgresql+psycopg://user@host:port/db.",
    )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once; call ``get_settings.cache_clear()`` to re-read."""
    return Settings()
