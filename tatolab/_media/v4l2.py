"""V4L2 devices with the standard library: which /dev/video* are cameras or v4l2loopback devices,
and an output device's format (VIDIOC_QUERYCAP, VIDIOC_S_FMT through ioctl; no extra library).

The runtime asks this too (which device a CameraSource's default means, which exist), so it
imports nothing heavy.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

DEV = Path("/dev")

# struct v4l2_capability: driver[16], card[32], bus_info[32], version, capabilities, device_caps, reserved[3]
_CAPABILITY = struct.Struct("16s32s32sIII12x")
VIDIOC_QUERYCAP = 0x80685600  # _IOR('V', 0, struct v4l2_capability)
# struct v4l2_format: u32 type, (4 bytes padding: the union holds pointers), 200-byte union
_FORMAT_SIZE = 208
VIDIOC_S_FMT = 0xC0D05605  # _IOWR('V', 5, struct v4l2_format)
# struct v4l2_pix_format, the union's first member: width, height, pixelformat, field, bytesperline,
# sizeimage, colorspace, priv, flags, ycbcr_enc, quantization, xfer_func
_PIX_FORMAT = struct.Struct("12I")
_PIX_AT = 8  # after the type and its padding

CAP_VIDEO_CAPTURE = 0x00000001
CAP_VIDEO_OUTPUT = 0x00000002
CAP_DEVICE_CAPS = 0x80000000
BUF_TYPE_VIDEO_OUTPUT = 2
FIELD_NONE = 1
COLORSPACE_SRGB = 8
LOOPBACK_DRIVER = "v4l2 loopback"

FOURCC = {"yuyv422": b"YUYV", "rgb24": b"RGB3"}
BYTES_PER_PIXEL = {"yuyv422": 2, "rgb24": 3}


@dataclass(frozen=True)
class Capability:
    driver: str
    card: str
    caps: int  # what this device node does (device_caps where the driver gives them)

    @property
    def captures(self) -> bool:
        return bool(self.caps & CAP_VIDEO_CAPTURE)

    @property
    def loopback(self) -> bool:
        return self.driver == LOOPBACK_DRIVER


def video_nodes() -> list[Path]:
    """/dev/video0, /dev/video1, ... in number order (character devices only)."""
    found = []
    try:
        names = os.listdir(DEV)
    except OSError:
        return []
    for name in names:
        match = re.fullmatch(r"video(\d+)", name)
        if match and _is_char_device(DEV / name):
            found.append((int(match.group(1)), DEV / name))
    return [path for _, path in sorted(found)]


def _is_char_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def query(path: str | os.PathLike[str]) -> Capability:
    """VIDIOC_QUERYCAP on ``path``; OSError if it cannot be opened or is no V4L2 device."""
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        buffer = bytearray(_CAPABILITY.size)
        fcntl.ioctl(fd, VIDIOC_QUERYCAP, buffer)
    finally:
        os.close(fd)
    driver, card, _bus, _version, caps, device_caps = _CAPABILITY.unpack(buffer)
    return Capability(driver.split(b"\0")[0].decode(errors="replace"), card.split(b"\0")[0].decode(errors="replace"),
                      device_caps if caps & CAP_DEVICE_CAPS else caps)


def _capability(path: Path) -> Capability | None:
    try:
        return query(path)
    except OSError:
        return None


def cameras() -> list[Path]:
    """Capture devices that are real cameras (not v4l2loopback ones), in number order; where none can
    be asked, those this user may not open (so opening one says so, with the fix, instead of "no camera")."""
    found, forbidden = [], []
    for path in video_nodes():
        try:
            capability = query(path)
        except PermissionError:
            forbidden.append(path)
            continue
        except OSError:
            continue
        if capability.captures and not capability.loopback:
            found.append(path)
    return found or forbidden


def loopbacks() -> list[Path]:
    """v4l2loopback devices, in number order."""
    return [p for p in video_nodes() if (cap := _capability(p)) is not None and cap.loopback]


def loopback_module_loaded() -> bool:
    return Path("/sys/module/v4l2loopback").is_dir()


def device_path(device: str | int) -> Path:
    """A camera's path from its ``device`` setting: an index (2 or "2") is /dev/video2."""
    if isinstance(device, int) or (isinstance(device, str) and device.isdigit()):
        return DEV / f"video{int(device)}"
    return Path(device)


def resolve_camera(device: str | int | None) -> str | None:
    """The device a CameraSource with this ``device`` opens, as a canonical path (links such as
    /dev/v4l/by-id/... followed), or None when it names nothing: no camera here, or no such path."""
    if device is None:
        found = cameras()
        return str(found[0]) if found else None
    path = device_path(device)
    if not _is_char_device(path):  # no such path, or a file (which source= reads)
        return None
    return os.path.realpath(path)


def set_output_format(fd: int, width: int, height: int, pixel_format: str) -> int:
    """VIDIOC_S_FMT on an output device: ``width`` x ``height`` frames of ``pixel_format``
    (yuyv422 or rgb24); the bytes one frame takes."""
    line = width * BYTES_PER_PIXEL[pixel_format]
    buffer = bytearray(_FORMAT_SIZE)
    struct.pack_into("I", buffer, 0, BUF_TYPE_VIDEO_OUTPUT)
    fourcc = struct.unpack("<I", FOURCC[pixel_format])[0]
    _PIX_FORMAT.pack_into(buffer, _PIX_AT, width, height, fourcc, FIELD_NONE, line, line * height, COLORSPACE_SRGB,
                          0, 0, 0, 0, 0)
    fcntl.ioctl(fd, VIDIOC_S_FMT, buffer)
    got_width, got_height, got_fourcc = struct.unpack_from("III", buffer, _PIX_AT)
    if (got_width, got_height, got_fourcc) != (width, height, fourcc):
        raise OSError(errno.EINVAL, f"the device took {got_width}x{got_height} {struct.pack('<I', got_fourcc)!r} "
                                    f"instead of {width}x{height} {FOURCC[pixel_format]!r}")
    return line * height
