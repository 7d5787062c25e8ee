"""The encoder choice for H.264 / H.265 through PyAV: which FFmpeg options an encoder gets from
a node's config, opening one (the only reliable test of a hardware encoder: the FFmpeg build
has NVENC compiled in even where no NVIDIA driver exists), and why one did not open. Used by
the encoder built-ins (tatolab/_builtins/codecs.py) and the relay's video track (tatolab/_runtime/relay).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from tatolab._sdk.builtins.codecs import PRESETS

US = Fraction(1, 1_000_000)  # the time base encoders are fed: microsecond pts
# x264's preset names to NVENC's p1 (fastest) .. p7 (best)
NVENC_PRESETS = {name: f"p{min(7, 1 + i * 7 // len(PRESETS))}" for i, name in enumerate(PRESETS)}


def why_not(exc: Exception) -> str:
    """Why a codec did not open, in a line."""
    if type(exc).__name__ == "UnknownCodecError":
        return "not in this FFmpeg build (PyAV's wheels carry NVENC but not VAAPI; "\
               "pip install av --no-binary av builds against the system's FFmpeg)"
    reason = getattr(exc, "strerror", None) or str(exc)  # FFmpeg's own words, without the option dump
    return reason[:160]


def is_hardware(name: str) -> bool:
    return name.endswith(("_nvenc", "_vaapi", "_cuvid", "_qsv"))


def encoder_options(name: str, config: Any) -> dict[str, str]:
    """The FFmpeg options for encoder ``name`` from the node's config (the user's own last)."""
    options: dict[str, str] = {}
    if name.endswith("_nvenc"):
        options["preset"] = NVENC_PRESETS[config.preset]
        if config.tune == "zerolatency":
            options.update(tune="ull", zerolatency="1", delay="0", rc_lookahead="0")
    elif name.endswith("_vaapi"):
        pass  # VAAPI has neither presets nor tunes; bitrate and GOP are set on the context
    else:
        options["preset"] = config.preset
        if config.tune is not None:
            options["tune"] = config.tune
        if name == "libx265":
            options["x265-params"] = "log-level=warning"  # x265 prints its settings to stderr otherwise
    options.update({k: str(v) for k, v in config.options.items()})
    return options


def open_encoder(name: str, config: Any, width: int, height: int, rate: Fraction) -> Any:
    """An opened PyAV encoder ``name``; raises whatever FFmpeg raises when it cannot open here."""
    import av

    hwaccel = None
    if name.endswith("_vaapi"):
        from av.codec.hwaccel import HWAccel

        hwaccel = HWAccel(device_type="vaapi")
    ctx: Any = av.CodecContext.create(name, "w", hwaccel=hwaccel) if hwaccel else av.CodecContext.create(name, "w")
    ctx.width, ctx.height = width, height
    ctx.pix_fmt = "yuv420p"
    ctx.time_base = US
    ctx.framerate = rate  # rate control budgets bits per frame from it
    ctx.bit_rate = config.bitrate
    ctx.gop_size = config.keyframe_interval
    if config.tune == "zerolatency":
        ctx.max_b_frames = 0
    ctx.flags |= 1 << 22  # AV_CODEC_FLAG_GLOBAL_HEADER: the parameters travel as extradata on every packet
    ctx.options = encoder_options(name, config)
    ctx.open()
    return ctx
