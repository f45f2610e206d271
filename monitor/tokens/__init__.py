"""Named tokens and what they did: `/api/v1/tokens` and `/api/v1/audit`, signing in to the dashboard
with a token, the audit page, and `drift-monitor token create | list | revoke`."""
