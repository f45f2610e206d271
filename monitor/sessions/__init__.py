"""Host sessions, as one unit: which listing each host or gateway session still acts on.

| module | role (layer) | what |
|---|---|---|
| `service` | notify | sessions registered, heart-beaten, closed; `session-stale`, `session-long-lived` |
| `api` | webapp | `/api/v1/sessions`: hosts report the sessions they hold |
| `pages` | webapp | the sessions page: who is behind, what each missed, servers nobody monitors |
"""
