"""The dashboard: server-rendered pages over the same read queries as the API, without JavaScript.

Everything a server sends is attacker-controlled text: `rendering` makes it inert and visible on
every page. Signing in stores a signed, expiring cookie derived from the API token (`auth`); forms
carry a signed double-submit CSRF token and are refused from other origins (`csrf`).
"""
