"""Writes speech.wav, what examples/voice plays by default: phrases spoken by espeak-ng (Debian's
`espeak-ng`: apt install espeak-ng), with silence before, between and after. Run it with any Python
that has numpy: python make_speech.py [out.wav]. The tests call write_speech with phrases of their
own and check the segments found against the times it returns."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import wave

PHRASES = ["Hello, this stream finds speech.", "Each sentence becomes a segment of its own."]
LEAD_S, GAP_S, TAIL_S = 1.0, 1.5, 1.5
INK = 0.01  # a sample louder than this (of full scale) is speech, for the times returned


def write_speech(path: str, phrases: list[str] = PHRASES, lead_s: float = LEAD_S, gap_s: float = GAP_S,
                 tail_s: float = TAIL_S) -> list[tuple[float, float]]:
    """Write the WAV; returns each phrase's (first, last) loud sample, in seconds from the file's start."""
    import numpy as np

    parts, spans, rate, at = [], [], 0, 0
    for i, phrase in enumerate(phrases):
        with tempfile.NamedTemporaryFile(suffix=".wav") as spoken:
            subprocess.run(["espeak-ng", "-w", spoken.name, phrase], check=True)
            with wave.open(spoken.name, "rb") as wav:
                rate = wav.getframerate()
                pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype=np.int16)
        silence = np.zeros(int(rate * (lead_s if i == 0 else gap_s)), dtype=np.int16)
        parts += [silence, pcm]
        at += len(silence)
        loud = np.nonzero(np.abs(pcm.astype(np.float32)) > INK * 32768)[0]
        spans.append((float(at + loud[0]) / rate, float(at + loud[-1]) / rate))
        at += len(pcm)
    parts.append(np.zeros(int(rate * tail_s), dtype=np.int16))
    with wave.open(path, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(np.concatenate(parts).tobytes())
    return spans


if __name__ == "__main__":
    print(write_speech(sys.argv[1] if len(sys.argv) > 1 else "speech.wav"))
