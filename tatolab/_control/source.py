"""Which stream to load: one value for the quartet every load carries (run, run -d, dev, a kept record)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any


@dataclass(frozen=True)
class StreamSource:
    """A project folder, and in it a target (``file.py:function``, ``module:function``), a file with
    one @stream, or its ``stream.py``; loaded under ``name`` when one is given (else the function's)."""

    project: Path
    target: str | None = None
    file: str | None = None
    name: str | None = None

    @classmethod
    def of(cls, project: str | Path, target: str | None = None, file: str | None = None,
           name: str | None = None) -> "StreamSource":
        return cls(Path(project), target or None, file or None, name or None)

    def args(self) -> dict[str, Any]:
        """As a request's arguments (``load``, ``dev``): the ones given."""
        given = {"target": self.target, "file": self.file, "name": self.name}
        return {"project": str(self.project), **{k: v for k, v in given.items() if v}}

    def compile_options(self) -> list[str]:
        """As options of ``python -m tatolab._compile``. ``--opt=value``: a value that starts with
        ``-`` (``--name=-x``) is never read as an option."""
        given = {"dir": str(self.project), "target": self.target, "file": self.file, "name": self.name}
        return [f"--{k}={v}" for k, v in given.items() if v]
