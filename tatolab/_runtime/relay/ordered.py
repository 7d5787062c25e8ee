"""Reading an output's track of bags as ``feed.py`` writes it: each group's frames in order, one
bag a frame, a group numbered by its first bag's number. So a reader knows how many bags it
missed: those between the bags it got and the next group's number (a group that came after a
newer one, which moq's ``next_group`` skips, or one cut short)."""

from __future__ import annotations

from typing import Any, AsyncIterator


async def bags(track: Any) -> AsyncIterator[tuple[Any, int]]:
    """Each frame of ``track`` (a moq ``TrackConsumer``) in order, with how many bags were missed
    just before it (0 while nothing is missed); ends when the track does."""
    import moq

    expected: int | None = None  # the next bag's number; unknown until the first group
    while True:
        group = await track.next_group()
        if group is None:
            return
        number = group.sequence
        missed = number - expected if expected is not None and number > expected else 0
        try:
            while (frame := await group.read_frame()) is not None:
                yield frame, missed
                missed = 0
                number += 1
        except moq.Error:
            pass  # the group was cut short (expired on the way): the next group's number tells how much
        expected = number
