"""Observational memory, distributed runtime: configuration and the SQL session store.

Imports run inwards only (``om_workers`` -> ``om_core``); nothing here imports ``om_api``.
"""

from om_workers.config import Settings, get_settings
from om_workers.errors import OMWorkersError

__all__ = ["OMWorkersError", "Settings", "get_settings"]
