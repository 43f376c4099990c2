"""Small helpers shared by the repository modules: counted updates, plain SQL through the
driver, and opaque cursors."""

import base64
import binascii
import json
from datetime import datetime
from typing import Any, TypeVar, cast

from sqlalchemy import CursorResult
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import Select
from sqlalchemy.sql.dml import Delete, Update

from cnbrain.domain.bounds import has_control_characters
from cnbrain.storage.clock import as_utc
from cnbrain.storage.errors import BadCursor

MAX_PAGE = 1000
_T = TypeVar("_T")
_Id = TypeVar("_Id", str, int)


async def fetch_scalar(session: AsyncSession, statement: Select[_T]) -> _T | None:
    """The first column of the first row, or None; typed (AsyncSession.scalar is not)."""
    return (await session.execute(statement)).scalars().first()


async def execute_counted(session: AsyncSession, statement: Update | Delete) -> int:
    """Run an UPDATE/DELETE without ORM synchronisation and return the number of rows matched."""
    result = await session.execute(statement.execution_options(synchronize_session=False))
    return int(cast("CursorResult[Any]", result).rowcount)


async def driver_sql(session: AsyncSession, statement: str, *parameters: Any) -> Any:
    """Run `statement` (PostgreSQL, `$n` parameters) through the driver in the session's
    transaction: no SQLAlchemy compilation, so about a sixth of the CPU time of a Core
    statement; the batch writes use it with arrays (`unnest`), one statement whatever the
    batch. Pending ORM changes are not flushed first."""
    connection = await session.connection()
    return await connection.exec_driver_sql(statement, parameters)


def encode_cursor(values: list[Any]) -> str:
    """An opaque, URL-safe cursor holding `values` (JSON-able)."""
    raw = json.dumps(values, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, *, arity: int) -> list[Any]:
    """The values of a cursor made by `encode_cursor`; BadCursor if it is not one."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise BadCursor(f"cursor {cursor!r} is not valid") from None
    if not isinstance(values, list) or len(values) != arity or not all(map(_plain, values)):
        raise BadCursor(f"cursor {cursor!r} is not valid")
    return values


def encode_keyset(at: datetime, last_id: str | int) -> str:
    """The cursor of a page ordered by (time, id) whose last row is (`at`, `last_id`)."""
    return encode_cursor([as_utc(at).isoformat(), last_id])


def decode_keyset(cursor: str, id_type: type[_Id]) -> tuple[datetime, _Id]:
    """The (time, id) of a cursor made by `encode_keyset` with an id of `id_type`; BadCursor
    if it is not one."""
    at, last_id = decode_cursor(cursor, arity=2)
    if not isinstance(at, str) or not isinstance(last_id, id_type):
        raise BadCursor(f"cursor {cursor!r} is not valid")
    try:
        return as_utc(datetime.fromisoformat(at)), last_id
    except ValueError:
        raise BadCursor(f"cursor {cursor!r} is not valid") from None


_ID_RANGE = range(-(2**31), 2**31)
"""The ids of the tables paged by cursors (32-bit columns)."""


def _plain(value: Any) -> bool:
    """Whether a cursor's value can be a stored one: a string without control characters,
    an id within the columns' range, or any other JSON value than those."""
    if isinstance(value, str):
        return not has_control_characters(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value in _ID_RANGE
    return True


def check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE}, not {limit}")
