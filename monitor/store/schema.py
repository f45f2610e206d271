"""Every table of the schema: the store's own models and those of the units (approvals, identity).

The migrations are the schema's only source; this metadata is what they are compared with (and
what Alembic autogenerates from), so it must hold every model, wherever its concept lives.
"""

from __future__ import annotations

from monitor.approvals import models as approvals
from monitor.identity import models as identity
from monitor.store.models import Base

metadata = Base.metadata
UNIT_MODELS = (approvals, identity)
"""The units' model modules, imported so that their tables are in `metadata`."""
