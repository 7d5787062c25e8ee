"""What a surface backend serves, so a GPU one can replace the shared-memory pool unchanged.

``pool.Pool`` is the CPU backend (shared memory). A CUDA backend keeps the same surface ids,
leases and counts, hands out device memory shared between processes (CUDA IPC handles in place
of file mappings), and answers ``dlpack_device`` with ``(2, <device>)``; ``VideoFrame`` and the
bags stay as they are, and ``frame.cpu()`` becomes the explicit copy to host memory.
"""

from __future__ import annotations

from typing import Any, Protocol


class SurfaceBackend(Protocol):
    dlpack_device: tuple[int, int]  # (kDLCPU = 1, 0) here; (kDLCUDA = 2, device) on a GPU

    def allocate(self, width: int, height: int, format: str = "rgba8") -> Any:
        """A slot for a new frame, held by this process; raises PoolExhausted rather than wait."""

    def lease(self, surface_id: str) -> Any:
        """Hold the surface ``surface_id`` names; a stale or unknown id raises SurfaceError."""

    def release(self, slot: int) -> None: ...

    def publish(self, slot: int) -> None: ...

    def mapping(self, slot: int, need: int) -> Any:
        """Memory a buffer over the surface can be made from."""

    def stats(self) -> dict[str, Any]:
        """slots, in_use, bytes, budget_bytes, exhausted: what ``tatolab graph`` shows."""
