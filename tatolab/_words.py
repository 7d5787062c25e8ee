"""Counted words for messages: `1 node`, `3 nodes`."""

from __future__ import annotations


def counted(count: int, word: str, plural: str | None = None) -> str:
    """``count`` and ``word``, the word in the plural unless the count is exactly one."""
    return f"{count} {word if count == 1 else plural or word + 's'}"
