from __future__ import annotations

import pytest

from monitor.core.text import hidden_characters, is_hidden, make_visible, word_diff


@pytest.mark.parametrize(
    "char",
    [
        "\u200b",
        "\u200c",
        "\u200d",
        "\u2060",
        "\ufeff",
        "\u202e",
        "\u2066",
        "\u2069",
        "\u061c",
        "\u00ad",
        "\U000e0001",
        "\U000e0041",
        "\U000e007f",
        "\ufe0f",
        "\U000e0100",
        "\u3164",
        "\x1b",
        "\x00",
        "\x7f",
    ],
)
def test_hidden(char: str) -> None:
    assert is_hidden(char)


@pytest.mark.parametrize("char", ["a", " ", "\n", "\t", "\r", "é", "中", "😀", "\u00a0"])
def test_not_hidden(char: str) -> None:
    assert not is_hidden(char)


def test_make_visible_labels_hidden_and_terminal_controls() -> None:
    assert make_visible("a\u200bb\x1b[31mc\r") == "a<U+200B>b<U+001B>[31mc<U+000D>"
    assert make_visible("plain text\n") == "plain text\n"


def test_hidden_characters_set() -> None:
    assert hidden_characters("x\u202ey\u202e") == {"\u202e"}


def test_word_diff_round_trips() -> None:
    old, new = "the quick brown fox", "the slow brown dog jumps"
    ops = word_diff(old, new)
    assert "".join(t for op, t in ops if op != "+") == old
    assert "".join(t for op, t in ops if op != "-") == new
