"""Alert sinks: one module per kind of receiver, each behind the `Sink` interface of `base`.

A sink's module holds all of it: its `[[webhooks]]` settings (a subclass of `WebhookConfig`, when it
has settings of its own), the body it receives, the events it hears and whether open alerts are
re-posted to it. Every `Sink` subclass in a module of this package is found here at import, by its
`format`: no list to add it to. The config validates each `[[webhooks]]` entry as the settings of the
sink its `format` names (`WebhookEntry`), and everything else asks the webhook's sink what it sends
and hears (`sink_for`). To add a sink, see CONTRIBUTING.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Discriminator, Tag

from monitor.core.discovery import defined_in
from monitor.core.states import AlertEvent
from monitor.sinks.base import Sink, WebhookConfig


def _found() -> dict[str, type[Sink[Any]]]:
    """Every sink defined in a module of this package, by its format."""
    sinks: dict[str, type[Sink[Any]]] = {}
    for sink in defined_in(__name__, __path__, Sink, marker="format"):
        if sink.format in sinks:
            raise TypeError(f"two sinks have format {sink.format!r}: {sinks[sink.format]} and {sink}")
        sinks[sink.format] = sink
    return dict(sorted(sinks.items()))


SINKS: dict[str, type[Sink[Any]]] = _found()
"""Every sink by its `format` (the `[[webhooks]] format` key)."""


def _format_of(entry: Any) -> str | None:
    """The sink an entry names: its `format`, "standard" when it names none."""
    if isinstance(entry, dict):
        chosen = entry.get("format", "standard")
        return chosen if isinstance(chosen, str) and chosen in SINKS else None
    return getattr(entry, "format", None)


if TYPE_CHECKING:
    WebhookEntry = WebhookConfig
else:
    WebhookEntry = Annotated[
        Union[tuple(Annotated[sink.settings, Tag(name)] for name, sink in SINKS.items())],  # noqa: UP007
        Discriminator(
            _format_of,
            custom_error_type="unknown_format",
            custom_error_message=f"format: not a sink (use one of {', '.join(SINKS)})",
        ),
    ]
"""A `[[webhooks]]` entry, validated as the settings of the sink its `format` names."""


def sink_for(webhook: WebhookConfig) -> Sink[Any]:
    """The sink a webhook's format names, ready to send: its secrets read from the environment."""
    return SINKS[webhook.format](webhook)


def render(webhook: WebhookConfig, payload: Mapping[str, Any]) -> str:
    """The body text the webhook's sink receives for one alert event, as stored in the outbox."""
    return SINKS[webhook.format].render(payload, webhook)


def hears(webhook: WebhookConfig, event: AlertEvent) -> bool:
    """Whether the webhook's sink is told of `event` (without reading its secrets)."""
    return event in SINKS[webhook.format].hears


def reposts_open_alerts(webhook: WebhookConfig) -> bool:
    return SINKS[webhook.format].reposts_open_alerts


__all__ = [
    "SINKS",
    "Sink",
    "WebhookConfig",
    "WebhookEntry",
    "hears",
    "render",
    "reposts_open_alerts",
    "sink_for",
]
