"""Writes text.mp4, the video examples/read-text reads by default: words in black on white, a new
set every two seconds, H.264. Run it with any Python that has PyAV and Pillow (the runtime's
does): python make_video.py [out.mp4]. The tests call write_text_video with words of their own."""

from __future__ import annotations

import sys
from fractions import Fraction

SCENES = [["TATOLAB", "READS", "TEXT"], ["LIVE", "VIDEO", "OCR"], ["HELLO", "WORLD"]]


def scene_boxes(words: list[str], width: int, height: int, size: int) -> list[tuple[str, int, int]]:
    """Where each word of a scene is drawn: (word, x, y) of its top left corner."""
    step = height // (len(words) + 1)
    return [(word, width // 8 + 40 * i, step * (i + 1) - size // 2) for i, word in enumerate(words)]


def word_boxes(words: list[str], width: int = 640, height: int = 360, size: int = 40) -> dict[str, tuple[int, int, int, int]]:
    """Each word's ink as drawn (x0, y0, x1, y1), in the frame's pixels."""
    from PIL import Image, ImageDraw, ImageFont

    draw = ImageDraw.Draw(Image.new("RGB", (width, height)))
    font = ImageFont.load_default(size=size)
    return {word: tuple(int(v) for v in draw.textbbox((x, y), word, font=font))  # type: ignore[misc]
            for word, x, y in scene_boxes(words, width, height, size)}


def write_text_video(path: str, scenes: list[list[str]] = SCENES, width: int = 640, height: int = 360,
                     fps: int = 10, seconds_per_scene: float = 2.0, size: int = 40) -> None:
    import av
    import numpy as np
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=size)
    with av.open(path, "w") as out:
        video = out.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        video.codec_context.time_base = Fraction(1, fps)
        index = 0
        for words in scenes:
            picture = Image.new("RGB", (width, height), (255, 255, 255))
            draw = ImageDraw.Draw(picture)
            for word, x, y in scene_boxes(words, width, height, size):
                draw.text((x, y), word, fill=(0, 0, 0), font=font)
            pixels = np.asarray(picture)
            for _ in range(int(seconds_per_scene * fps)):
                frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
                frame.pts = index
                index += 1
                for packet in video.encode(frame):
                    out.mux(packet)
        for packet in video.encode():
            out.mux(packet)


if __name__ == "__main__":
    write_text_video(sys.argv[1] if len(sys.argv) > 1 else "text.mp4")
