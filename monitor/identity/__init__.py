"""Identity: who is calling, what their role lets them do, and the audit log of it.

Every caller is someone: a named token with a role, the configured token (`config`, admin), a person
signed in to the dashboard with a token or behind a trusted authenticating proxy, or the command
line. The authenticated name is the actor of every change, and every change and every refused
attempt is in the audit log (docs/contract.md section 12, docs/security.md). Roles and the caller
are `monitor.core.roles`; the tables are `monitor.store.access`; making tokens and reading the audit
log are `monitor.tokens`.

- `storage`, `records`: tokens made, listed, revoked and checked (hashes only); audit events.
- `audit`: refused attempts written off the request path.
- `callers`: who a request is (bearer token, dashboard session, trusted proxy), and the role checks
  routes depend on.
- `signin`: dashboard sessions, the CSRF tokens bound to them, messages after an action.
"""
