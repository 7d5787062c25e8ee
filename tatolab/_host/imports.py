"""The modules a node imports, told to the runtime as they are imported.

`tatolab dev` keeps a node running across a reload only when none of the saved files can
be one of its modules (tatolab/_runtime/rules/reload.py), so the runtime must know every module
the node's process imported, including those imported late, inside ``process()``. A finder
at the front of ``sys.meta_path`` sees each import that is not already done (import
statements and ``importlib.import_module`` alike) and lets the usual finders do the work.
Until ``flush`` (the node is built), names gather and go as one message with every module
loaded by then; after it, each import is told at once.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable


class ImportReporter:
    def __init__(self, send: Callable[[dict[str, Any]], None]) -> None:
        self._send = send
        self._live = False
        self._lock = threading.Lock()

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if self._live:
            self._send({"imports": [name]})
        return None  # the usual finders import it

    def flush(self) -> None:
        """Tell every module imported so far, then each later one as it comes."""
        with self._lock:
            if not self._live:
                self._live = True
                self._send({"imports": sorted(sys.modules), "all": True})
