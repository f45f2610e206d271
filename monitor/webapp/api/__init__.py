"""The JSON API under /api/v1 (docs/contract.md section 8): a router per resource, shared shapes in `schemas`.

Approvals and decisions, host sessions and silences have their routers in their units
(`monitor.approvals.api`, `monitor.sessions.api`, `monitor.silences.api`). The API reads storage
through `monitor.store.queries` and answers with its records; writes go through the request's
session or the modules that own them (`monitor.sessions.service`, `monitor.notify.alerts`).
Headers of servers and webhook secrets are in no record, so no endpoint can return them.
"""
