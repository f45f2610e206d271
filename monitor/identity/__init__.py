"""Identity, as one unit: who is calling, what their role lets them do, and the audit log of it.

Every caller is someone: a named token with a role, the configured token (`config`, admin), a person
signed in to the dashboard with a token or behind a trusted authenticating proxy, or the command
line. The authenticated name is the actor of every change, and every change and every refused
attempt is in the audit log (docs/contract.md section 12, docs/security.md).

| module | role (layer) | what |
|---|---|---|
| `roles` | core | roles, what each may do, and the caller |
| `models` | store | the tables: tokens (hashes only), audit events, the key that signs sessions |
| `records` | store | the API shapes of a token and an audit event |
| `storage` | store | tokens made, listed, revoked and checked; audit events written and read |
| `audit` | notify | refused attempts written off the request path |
| `callers` | webapp | who a request is: bearer token, dashboard session, trusted proxy; the role checks |
| `acts` | webapp | a change in a request: its actor and the audit event that commits with it |
| `signin` | webapp | dashboard sessions, CSRF tokens bound to them, messages after an action |
| `api` | webapp | `/api/v1/tokens`, `/api/v1/audit` |
| `pages` | webapp | signing in and out, the audit page |
| `cli` | cli | `drift-monitor token create`, `list`, `revoke` |
"""
