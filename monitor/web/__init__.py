"""The web plumbing every page and API route stands on: the request's context and database session,
who is calling and what the change they make records, the API's shared vocabulary, refusing query
strings it does not understand, forms and their CSRF tokens, rendering hostile text inert and
visible, and the shared views of a changed tool.

It knows no feature: each concept the dashboard and the API serve is a package of its own above it
(`monitor.alerts`, `monitor.servers`, ...), and `monitor.app` puts them together.
"""
