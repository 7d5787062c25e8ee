"""msgspec's words for a value that does not fit its type, as the part of a message that says where."""

from __future__ import annotations

import re

import msgspec


def fit_problem(exc: msgspec.ValidationError) -> str:
    """msgspec's "Expected `str`, got `int` - at `$.inputs.in.delivery_profile`" as
    "inputs.in.delivery_profile: expected `str`, got `int`" (a map's key shows as ``[...]``)."""
    text, sep, where = str(exc).rpartition(" - at `")
    if not sep:
        text, where = where, "$"
    text = f"{text[:1].lower()}{text[1:]}"
    place = re.sub(r"^\$\.?", "", where.rstrip("`"))
    return f"{place}: {text}" if place else text
