"""What several revisions build the same way, each written once: the column types they
create, a child table's key to its parent, and a nullable column a revision adds and its
downgrade drops.

Revisions rely on what these do: change one only in a way every revision using it still
wants (a revision's effect on a database never changes; :mod:`om_workers.store.schema` may).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

# SQLite only aliases the rowid (and so autoincrements) for a column typed exactly INTEGER.
KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)


def owned_by(table: str, column: str, parent: str) -> sa.ForeignKeyConstraint:
    """``table.column``'s key to ``parent`` (``"sessions.pk"``): a row of ``table`` belongs to
    that parent row and is deleted with it. Named as the schema's naming convention names it
    (``fk_<table>_<column>_<parent table>``), so later revisions can find it by name."""
    parent_table = parent.partition(".")[0]
    name = f"fk_{table}_{column}_{parent_table}"
    return sa.ForeignKeyConstraint([column], [parent], name=name, ondelete="CASCADE")


class NullableColumn:
    """Column ``name`` of ``table``, of ``type_``, nullable and without a default: :meth:`add`
    in a revision's upgrade, :meth:`drop` in its downgrade.

    Adding it is instant on SQLite and PostgreSQL alike (no row is rewritten). Dropping it is
    not the same on both: SQLite cannot drop every column in place (not one under an index or
    a constraint), so the drop runs in batch mode, which copies the table there and is a plain
    ``ALTER TABLE ... DROP COLUMN`` on PostgreSQL.
    """

    def __init__(self, table: str, name: str, type_: sa.types.TypeEngine[Any]) -> None:
        self.table = table
        self.name = name
        self.type = type_

    def add(self) -> None:
        """Add the column; every existing row reads ``NULL``."""
        # A new Column each time: a Column belongs to the one table it was added to.
        op.add_column(self.table, sa.Column(self.name, self.type, nullable=True))

    def drop(self) -> None:
        """Drop the column (batch mode: see the class docstring)."""
        with op.batch_alter_table(self.table) as batch:
            batch.drop_column(self.name)
