"""Silences as people make and end them: muting findings by server, tool and rule until a time, with
who and why. What a silence mutes is `monitor.notify.silences` (the alert path asks it before
opening an alert).

- `api`: `/api/v1/silences`.
- `pages`: the silences page and its form.
- `cli`: `drift-monitor silence add`, `list`, `expire`.
"""
