"""Every table of the schema: the monitor's own (`models`) and those of who may do what (`access`).

The migrations are the schema's only source; this metadata is what they are compared with (and
what Alembic autogenerates from), so it must hold every model.
"""

from __future__ import annotations

from monitor.store import access
from monitor.store.models import Base

metadata = Base.metadata
MODELS = (access,)
"""The model modules other than `monitor.store.models`, imported so that their tables are in `metadata`."""
