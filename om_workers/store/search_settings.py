"""What a search's read transaction asks of PostgreSQL (nothing of SQLite).

- **Plans for its own values** (``plan_cache_mode = force_custom_plan``). A statement psycopg
  prepared (on its fifth use on a connection) may run on a generic plan, made without its
  values, once that plan looks no costlier than theirs. For a search that is wrong: a plan
  made for a million-entry tenant's words ran a thousand-entry tenant's search at 75 ms where
  its own plan takes 6. The hot statements of a turn pick rows by key, and keep their
  generic plans.
- **Reads ahead** (``effective_io_concurrency``, :data:`READ_AHEAD`). A search reads the
  rows of its rarest terms, a few thousand scattered over as many heap pages; where those
  pages are not cached, PostgreSQL's default (one page asked at a time) waits on each read in
  turn. With reads ahead, a bitmap heap scan asks the kernel for the next pages while it
  reads one. Measured on a million-entry tenant, nothing cached: p99 of 100 searches 326-339
  ms with the default, 112-116 ms at 64. A server built without prefetch support (one whose
  platform lacks ``posix_fadvise``) refuses any other value than 0: its searches go without.

Both are ``SET LOCAL``: they end with the transaction, and the pooled connection's next
transaction runs on the server's settings.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

READ_AHEAD = 64
"""Pages a search's bitmap heap scans ask for ahead (``effective_io_concurrency``)."""

_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan"
_BOTH = (
    "SELECT set_config('plan_cache_mode', 'force_custom_plan', true), "
    "set_config('effective_io_concurrency', %(pages)s, true)"
)
_READ_AHEAD = "SELECT set_config('effective_io_concurrency', %(pages)s, true)"

_READS_AHEAD: WeakKeyDictionary[Engine, bool] = WeakKeyDictionary()
"""Whether each engine's server took :data:`READ_AHEAD` (learnt at its first search)."""


def tune_for_search(connection: Connection, read_ahead: int = READ_AHEAD) -> None:
    """Set this transaction's plans and reads ahead for a search (see the module; a no-op on
    SQLite). The first search on an engine learns, in a savepoint, whether its server takes
    ``read_ahead``; a server that refuses it is not asked again."""
    if connection.dialect.name != "postgresql":
        return
    pages = {"pages": str(read_ahead)}
    engine = connection.engine
    known = _READS_AHEAD.get(engine)
    if known:
        connection.exec_driver_sql(_BOTH, pages)
        return
    connection.exec_driver_sql(_PLANS)
    if known is None:
        _READS_AHEAD[engine] = _try_read_ahead(connection, pages)


def _try_read_ahead(connection: Connection, pages: dict[str, str]) -> bool:
    try:
        with connection.begin_nested():
            connection.exec_driver_sql(_READ_AHEAD, pages)
    except DBAPIError:
        return False
    return True
