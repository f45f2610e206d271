"""Host sessions: which listing each host or gateway session still acts on.

- `service`: sessions registered, heart-beaten, closed; `session-stale` and `session-long-lived`,
  raised through the one alert path.
- `api`, `bodies`: `/api/v1/sessions`, where hosts report the sessions they hold, and what they send.
- `pages`: the sessions page: who is behind, what each missed, servers nobody monitors.
"""
