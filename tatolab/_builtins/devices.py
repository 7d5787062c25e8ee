"""Audio devices through PortAudio (sounddevice): found by name, or the system's default."""

from __future__ import annotations

from typing import Any


class DeviceMissing(LookupError):
    """No device of that name (or none at all): the message names it and lists the devices there are,
    or says how to get one."""


class DeviceAmbiguous(LookupError):
    """Several devices have the name given in part: the message lists them."""


HOW_TO_GET = {
    "input": "plug in a microphone (a USB one), or run PulseAudio with a source (`pactl load-module "
             "module-null-source` gives a silent one; PortAudio reaches PulseAudio with libasound2-plugins)",
    "output": "plug in speakers or headphones, or run PulseAudio with a sink (`pactl load-module "
              "module-null-sink` gives a silent one; PortAudio reaches PulseAudio with libasound2-plugins)",
}


def portaudio() -> Any:
    """The sounddevice module; an ImportError saying what to install when PortAudio is missing."""
    try:
        import sounddevice
    except OSError as exc:  # the Python package is there, the PortAudio library is not
        raise ImportError(
            f"the audio built-ins play and capture through PortAudio, which is not installed ({exc}). "
            "Install it: apt install libportaudio2 (Debian, Ubuntu), brew install portaudio (macOS)"
        ) from None
    return sounddevice


def device_if_there(name: str | None, kind: str, node: str, waiting: Any, *,
                    fresh: bool) -> tuple[Any, dict[str, Any]] | None:
    """PortAudio and the ``kind`` device named ``name`` (see find_device), or None after telling
    ``waiting`` (tatolab/_builtins/waiting.py) what is missing: PortAudio, or the device. ``fresh``:
    look at the devices again (PortAudio lists the devices it found when it started)."""
    try:
        sd = portaudio()
        if fresh:
            sd._terminate()
            sd._initialize()
        return sd, find_device(sd, name, kind, node)
    except (ImportError, DeviceMissing) as exc:
        waiting.on(str(exc))
        return None


def find_device(sd: Any, name: str | None, kind: str, node: str) -> dict[str, Any]:
    """The input (``kind="input"``) or output device named ``name`` (exactly, else the one whose
    name holds it, case-insensitively), or the default one for ``name=None``."""
    channels_key = f"max_{kind}_channels"
    devices = [dict(d, index=i) for i, d in enumerate(sd.query_devices()) if d.get(channels_key, 0) > 0]
    if not devices:
        raise DeviceMissing(f"node {node}: there is no {kind} device on this machine (PortAudio lists none); "
                            f"to get one, {HOW_TO_GET[kind]}")
    if name is None:
        try:
            default = sd.query_devices(kind=kind)
        except Exception as exc:  # PortAudio says -1: no default device
            default = None
            why = str(exc)
        if default is not None and default.get(channels_key, 0) > 0:
            return dict(default, index=default.get("index", sd.default.device[0 if kind == "input" else 1]))
        raise DeviceMissing(_missing(f"there is no default {kind} device ({why if default is None else 'it has no channels'})",
                                     devices, kind, node))
    exact = [d for d in devices if d["name"] == name]
    if exact:
        return exact[0]
    partial = [d for d in devices if name.lower() in d["name"].lower()]
    if len(partial) == 1:
        return partial[0]
    if len(partial) > 1:
        listed = ", ".join(repr(d["name"]) for d in partial)
        raise DeviceAmbiguous(f"node {node}: {len(partial)} {kind} devices have {name!r} in their names: {listed}. "
                            "Give the device's full name in config device=")
    return _raise_missing(f"there is no {kind} device named {name!r}", devices, kind, node)


def _missing(what: str, devices: list[dict[str, Any]], kind: str, node: str) -> str:
    listed = ", ".join(repr(d["name"]) for d in devices) or "none"
    return (f"node {node}: {what}. {kind.capitalize()} devices on this machine: {listed}. "
            f"Give one of them in config device=, or leave device out for the default")


def _raise_missing(what: str, devices: list[dict[str, Any]], kind: str, node: str) -> dict[str, Any]:
    raise DeviceMissing(_missing(what, devices, kind, node))
