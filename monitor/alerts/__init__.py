"""Alerts as people see and handle them: `/api/v1/alerts`, the alerts page and one alert's page.

What opens, updates and resolves an alert is `monitor.notify` (the one path from a finding to an
alert); this package is what the dashboard and the API offer of it.
"""
