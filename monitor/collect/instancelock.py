"""One `serve` per SQLite database: a lock file beside the database, held for the life of the process.

A module of its own, importing only the standard library and SQLAlchemy's URL parser, so that
`deploy/demo.py` can check the lock before it loads the rest of the service.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from sqlalchemy.engine import make_url


class InstanceLockError(RuntimeError):
    """Another process holds a SQLite database's lock file; `holder` is what it wrote there."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


def lock_sqlite(database_url: str, role: str = "drift-monitor serve") -> IO[str] | None:
    """Hold a lock file beside a SQLite database for the life of the process; None for other databases.

    The file names its holder (`role (pid N)`), for the message of whoever finds it taken.
    """
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    path = Path(url.database).expanduser().resolve().with_name(Path(url.database).name + ".lock")
    handle = path.open("a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another drift-monitor process"
        handle.close()
        raise InstanceLockError(
            f"{holder} is already running on {url.database}; SQLite supports one instance: stop it, or use "
            "PostgreSQL to run several",
            holder,
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{role} (pid {os.getpid()})")
    handle.flush()
    return handle
