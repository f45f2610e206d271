"""The web app: JSON API and dashboard."""
