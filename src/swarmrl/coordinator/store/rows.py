"""How many rows an UPDATE or DELETE changed.

SQLAlchemy types `Session.execute` as answering a plain `Result`; a data-changing statement's is a
`CursorResult`, the one that counts rows.
"""

from typing import Any

from sqlalchemy import CursorResult, Result


def rows_changed(result: Result[Any]) -> int:
    assert isinstance(result, CursorResult)  # what an UPDATE or DELETE answers
    return result.rowcount or 0
