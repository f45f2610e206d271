"""What a version's model-visible text raises, in the poll's transaction: a server's first listing
judged as a whole, the other servers' tools a change names, and the server's instructions.

The tool rules that judge text run with the diff (`monitor.core.rules.poisoning`); what needs the
database or the whole version is here: first sight has no previous version to diff against,
`shadows-other-server` asks which other monitored servers list a name, and the instructions are kept
with the version outside the fingerprint, like `_meta`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.core.diff import first_sight
from monitor.core.findings import Finding, ToolChange
from monitor.core.rules import poisoning
from monitor.core.rules.catalog import Cleared, Verdict, judged
from monitor.store.listings import chunks
from monitor.store.models import ListingTool, Server, Snapshot, ToolDefinition, newest_version
from monitor.store.polled import SuccessfulPoll, instructions_changed


def judge_text(
    session: Session,
    server: Server,
    previous: Snapshot | None,
    snapshot: Snapshot,
    poll: SuccessfulPoll,
    changes: Sequence[ToolChange],
) -> tuple[list[Finding], frozenset[Cleared]]:
    """What a new version's text raises beyond the diff's tool rules: at the server's first version,
    every tool judged whole (`first_sight`); at any version, the other servers' tools the changed
    tools name; and what the instructions raise when they differ from the previous version's."""
    verdicts: list[Verdict] = []
    findings: list[Finding] = []
    if previous is None:
        findings += first_sight(poll.listing)
        changes = [ToolChange(name, None, dict(tool)) for name, tool in poll.listing.tools.items()]
    verdicts += poisoning.shadowing(
        changes, poll.listing.tools, lambda names: listed_elsewhere(session, server.id, names)
    )
    if previous is None:
        verdicts += poisoning.instructions_verdicts(server.name, None, poll.instructions, first=True)
    elif previous.instructions_digest is not None and instructions_changed(previous, poll):
        verdicts += poisoning.instructions_verdicts(
            server.name, previous.instructions, poll.instructions, first=False
        )
    raised, cleared = judged(verdicts)
    return findings + raised, cleared


def instructions_in_place(
    server: Server, snapshot: Snapshot, poll: SuccessfulPoll
) -> tuple[list[Finding], frozenset[Cleared]]:
    """The version's listing is unchanged but its instructions are not: judged, then kept. A version
    stored before instructions were kept (no digest) takes the poll's without a finding."""
    verdicts: list[Verdict] = []
    if snapshot.instructions_digest is not None:
        verdicts = poisoning.instructions_verdicts(
            server.name, snapshot.instructions, poll.instructions, first=False
        )
    snapshot.instructions, snapshot.instructions_digest = poll.instructions, poll.instructions_digest
    return judged(verdicts)


def listed_elsewhere(session: Session, server_id: int, names: set[str]) -> dict[str, list[str]]:
    """Which of `names` the current versions of the other servers list: name -> those servers."""
    found: dict[str, list[str]] = defaultdict(list)
    for chunk in chunks(sorted(names), 500):
        rows = session.execute(
            select(ToolDefinition.name, Server.name)
            .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
            .join(Snapshot, Snapshot.listing_id == ListingTool.listing_id)
            .join(Server, Server.id == Snapshot.server_id)
            .where(
                ToolDefinition.name.in_(chunk),
                Server.id != server_id,
                Snapshot.version == newest_version(Snapshot.server_id),
            )
            .distinct()
        )
        for name, server in rows:
            found[name].append(server)
    return dict(found)
