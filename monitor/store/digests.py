"""What a poller knew about listings before it started: each server's current version's digest.

The poller skips checking and canonicalising a listing whose JSON text it has seen before
(`Poller._index`). The text's SHA-256 is kept with the version it was seen as
(`Snapshot.listing_digest`), so a restarted instance, or another one sharing the database, knows it
too. A digest names one text and a text one listing, so the pair read here is never wrong, only
possibly not the server's current listing any more: the group commit hands such a poll back, and the
writer records it as the new version it is (`monitor.store.batch`).
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import Select, bindparam, select
from sqlalchemy.orm import Session, sessionmaker

from monitor.store.models import Listing, Snapshot, newest_version

CHUNK = 500
"""Servers per `IN (...)` list."""


def _current_digests(some: bool) -> Select[int, bytes | None, str]:
    """Each server's newest version, where it has a digest, with its listing's fingerprint; of the
    `ids` list when `some`."""
    query = (
        select(Snapshot.server_id, Snapshot.listing_digest, Listing.fingerprint)
        .join(Listing, Snapshot.listing_id == Listing.id)
        .where(Snapshot.listing_digest.is_not(None), Snapshot.version == newest_version(Snapshot.server_id))
    )
    return query.where(Snapshot.server_id.in_(bindparam("ids", expanding=True))) if some else query


_ALL = _current_digests(some=False)
_SOME = _current_digests(some=True)


def current_digests(
    sessions: sessionmaker[Session], server_ids: Collection[int] | None = None
) -> dict[int, tuple[bytes, str]]:
    """Per server (every one, or those of `server_ids`), the digest of a JSON text of its current
    version's listing and that listing's fingerprint; servers whose current version has no digest
    (stored before digests were kept, or only ever polled with secrets redacted) are left out."""
    found: dict[int, tuple[bytes, str]] = {}
    with sessions() as session:
        if server_ids is None:
            rows = list(session.execute(_ALL))
        else:
            ids = sorted(server_ids)
            rows = [
                row
                for start in range(0, len(ids), CHUNK)
                for row in session.execute(_SOME, {"ids": ids[start : start + CHUNK]})
            ]
    for server_id, digest, fingerprint in rows:
        if digest is not None:
            found[server_id] = (digest, fingerprint)
    return found
