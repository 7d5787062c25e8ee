"""``Value``: a plain class equal by its fields and shown with them, as a dataclass is, for the
modules every CLI command loads (importing dataclasses costs a command ~20% of its start)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any


class Value:
    """Its fields are its ``__slots__``: equal when of the same class with equal fields, hashed by
    them (as a frozen dataclass: fails for a list or dict field), shown as ``Name(field=value, ...)``."""

    __slots__: tuple[str, ...] = ()

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__slots__)})"
