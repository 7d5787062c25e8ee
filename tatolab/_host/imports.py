"""The modules a node imports, and the project files they come from, told to the runtime as
they are imported.

`tatolab dev` keeps a node running across a reload only when none of the saved files can
be one of its modules (tatolab/_runtime/rules/reload.py), so the runtime must know every module
the node's process imported, including those imported late, inside ``process()``. A finder
at the front of ``sys.meta_path`` sees each import that is not already done (import
statements and ``importlib.import_module`` alike) and lets the usual finders do the work.
Until ``flush`` (the node is built), names gather and go as one message with every module
loaded by then; after it, each import is told at once.

Each message has the module names (``imports``) and the real paths of the project's files
among them (``files``): only files inside the project folder, since only those are watched.
"""

from __future__ import annotations

import os
import sys
import threading
from importlib.machinery import PathFinder
from typing import Any, Callable, Iterable


class ImportReporter:
    def __init__(self, send: Callable[[dict[str, Any]], None], project: str | None = None) -> None:
        self._send = send
        self._live = False
        self._lock = threading.Lock()
        self._looking = threading.local()
        self._roots = tuple({os.path.abspath(project) + os.sep, os.path.realpath(project) + os.sep}) if project else ()

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if self._live and not getattr(self._looking, "on", False):
            self._looking.on = True
            try:
                spec = PathFinder.find_spec(name, path)  # where the usual finders will find it (None: nowhere)
            except Exception:  # noqa: BLE001 - the import itself will say what is wrong
                spec = None
            finally:
                self._looking.on = False
            origin = getattr(spec, "origin", None)
            self._send({"imports": [name], "files": self._project_files([origin])})
        return None  # the usual finders import it

    def _project_files(self, origins: Iterable[str | None]) -> list[str]:
        files = set()
        for origin in origins:
            if isinstance(origin, str) and origin.startswith(self._roots):
                files.add(os.path.realpath(origin))
        return sorted(files)

    def flush(self) -> None:
        """Tell every module imported so far, then each later one as it comes."""
        with self._lock:
            if not self._live:
                self._live = True
                modules = list(sys.modules.values())
                files = self._project_files(getattr(module, "__file__", None) for module in modules)
                self._send({"imports": sorted(sys.modules), "files": files, "all": True})
