"""Servers as people see and register them: `/api/v1/servers`, the client views, the overview, a
server's pages and `drift-monitor import-registry`."""
