"""A refusal from the runtime: a code, a message for a person, and the fixes as operations.

The runtime never writes CLI syntax: a fix names an operation and its arguments
(``Fix("rm", {"name": "cam"}, "remove it first")``); the CLI renders it as a command or a
flag (tatolab/_cli/errors.py), an MCP server as a tool call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Fix:
    op: str  # the operation that fixes it
    args: dict[str, Any] = field(default_factory=dict)  # a value of None: the caller chooses one
    does: str = ""  # what doing it does, in words ("remove it first")


class ControlError(Exception):
    """A request that cannot be done; the message is for the person who asked.

    ``code`` says which refusal it is (clients render by it), ``fixes`` what would let it
    through, ``details`` the values a client needs to word it its own way.
    """

    def __init__(self, message: str, *, code: str = "refused", fixes: tuple[Fix, ...] | list[Fix] = (),
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fixes = tuple(fixes)
        self.details = details or {}

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "error": self.message, "details": self.details,
                "fixes": [{"op": f.op, "args": f.args, "does": f.does} for f in self.fixes]}

    @classmethod
    def from_wire(cls, answer: dict[str, Any]) -> "ControlError":
        fixes = [Fix(f.get("op", ""), f.get("args") or {}, f.get("does", "")) for f in answer.get("fixes") or ()]
        return cls(str(answer.get("error", "the runtime refused the request")), code=answer.get("code", "refused"),
                   fixes=fixes, details=answer.get("details") or {})
