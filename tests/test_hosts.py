"""monitor.core.hosts: the registration check looks a name up only through the resolver it is given."""

from __future__ import annotations

from collections.abc import Sequence

from monitor.core.hosts import HostPolicy, IPAddress, Resolver, host_literal

POLICY = HostPolicy(("10.0.0.0/8", "*.corp.example"))


def answering(*answers: str) -> tuple[list[str], Resolver]:
    """A resolver that answers `answers` for any name, and the names it was asked."""
    asked: list[str] = []

    def resolve(host: str, port: int) -> Sequence[IPAddress]:
        asked.append(f"{host}:{port}")
        return [address for answer in answers if (address := host_literal(answer)) is not None]

    return asked, resolve


def test_a_name_inside_a_listed_network_is_checked_by_every_address_it_resolves_to() -> None:
    asked, resolve = answering("10.1.2.3")
    assert POLICY.url_refusal("https://svc.internal/mcp", resolve) is None
    assert asked == ["svc.internal:443"]
    asked, resolve = answering("10.1.2.3", "169.254.169.254")
    refusal = POLICY.url_refusal("http://svc.internal:8080/mcp", resolve)
    assert refusal is not None and "link-local, cloud metadata or reserved" in refusal
    assert asked == ["svc.internal:8080"]


def test_names_the_list_decides_alone_are_never_looked_up() -> None:
    asked, resolve = answering("169.254.169.254")
    assert POLICY.url_refusal("https://mcp.corp.example/mcp", resolve) is None
    refusal = HostPolicy().url_refusal("http://metadata.google.internal/", resolve)
    assert refusal is not None and "cloud metadata host name" in refusal
    assert HostPolicy().url_refusal("https://anything.example/mcp", resolve) is None
    assert asked == []


def test_a_name_that_cannot_be_looked_up_is_refused() -> None:
    def unresolvable(host: str, port: int) -> Sequence[IPAddress]:
        raise OSError(f"no such host {host}")

    assert POLICY.url_refusal("https://svc.internal/mcp", unresolvable) == (
        "svc.internal does not resolve, so it cannot be checked against allowed_server_hosts"
    )
    assert POLICY.url_refusal("https://svc.internal/mcp") == "svc.internal is not in allowed_server_hosts"
