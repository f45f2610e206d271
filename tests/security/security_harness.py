"""Shared by the security tests: walking every API operation, auditing pages for hostile markup, CSRF tokens.

(`drift-monitor serve` itself runs through tests/support, as everywhere else.)
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]")


def api_operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, operation) for every operation in an OpenAPI document."""
    return [
        (method, path, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]


def fill_path(path: str, operation: dict[str, Any], values: dict[str, str] | None = None) -> str:
    """The path with each `{param}` replaced: by `values[param]`, else a value of the right type."""
    types = {
        p["name"]: p.get("schema", {}).get("type")
        for p in operation.get("parameters", [])
        if p["in"] == "path"
    }
    chosen = values or {}

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        return chosen.get(name) or ("1" if types.get(name) == "integer" else "x")

    return re.sub(r"\{([^}:]+)(?::[^}]*)?\}", value, path)


class PageAudit(HTMLParser):
    """What a hostile string could have become on a page: elements that run or load something,
    event-handler or script-URL attributes, and invisible characters left raw in text or attributes."""

    DANGEROUS = frozenset(
        {"script", "iframe", "object", "embed", "img", "svg", "math", "base", "link", "style"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        local = (dict(attrs).get("href") or "").startswith("/static/")
        if tag in self.DANGEROUS and not (tag == "link" and local):
            self.problems.append(f"<{tag}> element")
        for name, value in attrs:
            if name.startswith("on"):
                self.problems.append(f"{name}= attribute on <{tag}>")
            if name in ("href", "src", "action", "formaction") and value:
                if value.strip().lower().startswith(("javascript:", "data:", "vbscript:")):
                    self.problems.append(f"{name}={value!r} on <{tag}>")
                if value.startswith("//") or "://" in value:
                    self.problems.append(f"off-site {name}={value!r} on <{tag}>")
            if value and INVISIBLE.search(value):
                self.problems.append(f"raw invisible character in {name}= of <{tag}>")

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if INVISIBLE.search(data):
            self.problems.append(f"raw invisible character in text: {data[:60]!r}")


def audit(html: str) -> PageAudit:
    parser = PageAudit()
    parser.feed(html)
    parser.close()
    return parser


def form_csrf_token(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "the form carries no csrf_token field"
    return match.group(1)
