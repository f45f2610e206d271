"""Notification: alerts, webhook delivery and host sessions."""
