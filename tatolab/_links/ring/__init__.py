"""Shared-memory rings: one writer per output, any number of readers, each at its own pace.

A link between two nodes is a ring of fixed-size slots in a file under the user's own
/dev/shm folder; the writer never waits for, or looks at, its readers. Its parts:

    layout.py    the file's layout, its generations (grown for big bags, shrunk back),
                 making and removing the files
    writer.py    RingWriter: publishing a bag (the seqlock's stores and their order)
    reader.py    RingReader: reading bags (the seqlock's loads, one slot copy)
    wake.py      sleeping and waking: the Dekker handshake with the writer, one watcher
    counters.py  the runtime's look at a ring's counters

Every name below is importable from here, as it was when the ring was one module.
"""

from ..shm import RingError
from .counters import newest_bag, read_counters, release_reader
from .layout import (
    DEFAULT_LINK_MEMORY_MB,
    LINK_MEMORY_ENV,
    MAX_BAG_BYTES,
    MAX_READERS,
    create_ring,
    link_memory_limit,
    reap,
    remove_ring,
)
from .reader import RingReader
from .wake import wait_any
from .writer import BagTooLarge, RingWriter

__all__ = [
    "BagTooLarge",
    "RingError",
    "create_ring",
    "remove_ring",
    "reap",
    "RingWriter",
    "RingReader",
    "wait_any",
    "newest_bag",
    "read_counters",
    "release_reader",
    "MAX_READERS",
    "MAX_BAG_BYTES",
    "DEFAULT_LINK_MEMORY_MB",
    "LINK_MEMORY_ENV",
    "link_memory_limit",
]
