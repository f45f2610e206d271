"""The JSON API under /api/v1 (docs/contract.md section 8): a router per resource, shared shapes in `schemas`.

The API reads storage through `monitor.store.queries` and answers with its records; writes go
through the request's session or the modules that own them (`monitor.notify.sessions`,
`monitor.notify.alerts`). Headers of servers and webhook secrets are in no record, so no endpoint
can return them.
"""
