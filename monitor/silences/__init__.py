"""Silences, as one unit: muting findings by server, tool and rule until a time, with who and why.

| module | role (layer) | what |
|---|---|---|
| `service` | notify | silences and what they mute (`monitor.notify.alerts` asks before opening an alert) |
| `api` | webapp | `/api/v1/silences` |
| `pages` | webapp | the silences page and its form |
| `cli` | cli | `drift-monitor silence add`, `list`, `expire` |
"""
