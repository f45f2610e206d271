"""This database's identity (`installation`, made once by migration 0019): alert keys unique across
monitors, for receivers several of them may share (one PagerDuty service for two environments, or a
database rebuilt from scratch, whose alert ids start again at 1)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.store.models import Installation


@dataclass(frozen=True)
class AlertKeys:
    installation: str
    first_keyed_alert: int

    def key(self, alert_id: int) -> str:
        """The alert's key: `<installation id>:<alert id>`; alerts announced before the installation id
        existed keep their bare id, so receivers still tie their later events to the earlier ones."""
        if alert_id < self.first_keyed_alert:
            return str(alert_id)
        return f"{self.installation}:{alert_id}"


def alert_keys(session: Session) -> AlertKeys:
    """The database's installation id and where its keyed alerts begin."""
    row = session.scalars(select(Installation).limit(1)).one()
    return AlertKeys(row.id, row.first_keyed_alert)
