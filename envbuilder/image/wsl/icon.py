"""The Start-menu icon of envbuilder's WSL distros (`[shortcut] icon` in wsl-distribution.conf).

Microsoft's validator warns when a `.wsl` ships no icon (validate-modern.py: "No shortcut.icon
provided"; it must be an .ico of at most 1 MiB under /usr/lib/wsl or /usr/share/wsl). envbuilder
needs no asset for it: the icon is drawn here, from the pixel map below, as a single-image 16x16
ICO with a 16-colour palette (a BITMAPINFOHEADER image with its AND mask, the layout every Windows
version reads). The same code gives the same 318 bytes, so the rendered Dockerfile and the `.wsl`
stay reproducible.
"""

from __future__ import annotations

import base64
import struct

SIZE = 16
#: palette index -> (red, green, blue); 0 is under the transparent pixels
PALETTE: tuple[tuple[int, int, int], ...] = ((0, 0, 0), (0xED, 0x1C, 0x24), (0xFF, 0xFF, 0xFF))
#: "." transparent, "R" red, "W" white: a white E on a red square (rows from the top)
PIXELS = (
    "................",
    ".RRRRRRRRRRRRRR.",
    ".RRRRRRRRRRRRRR.",
    ".RRWWWWWWWWWRRR.",
    ".RRWWWWWWWWWRRR.",
    ".RRWWRRRRRRRRRR.",
    ".RRWWRRRRRRRRRR.",
    ".RRWWWWWWWWRRRR.",
    ".RRWWWWWWWWRRRR.",
    ".RRWWRRRRRRRRRR.",
    ".RRWWRRRRRRRRRR.",
    ".RRWWWWWWWWWRRR.",
    ".RRWWWWWWWWWRRR.",
    ".RRRRRRRRRRRRRR.",
    ".RRRRRRRRRRRRRR.",
    "................",
)
_INDEX = {".": 0, "R": 1, "W": 2}
_BITS = 4  # bits per pixel: a 16-colour palette


def _xor_rows() -> bytes:
    """The colour bitmap: bottom row first, two pixels per byte (high nibble first)."""
    out = bytearray()
    for row in reversed(PIXELS):
        for left, right in zip(row[::2], row[1::2], strict=True):
            out.append(_INDEX[left] << 4 | _INDEX[right])
    return bytes(out)


def _and_rows() -> bytes:
    """The transparency mask: bottom row first, 1 bit per pixel (1 = transparent), each row
    padded to 4 bytes."""
    out = bytearray()
    for row in reversed(PIXELS):
        bits = int("".join("1" if ch == "." else "0" for ch in row), 2)
        out += bits.to_bytes(SIZE // 8, "big") + b"\0" * (4 - SIZE // 8)
    return bytes(out)


def icon_bytes() -> bytes:
    """The ICO file: ICONDIR, one ICONDIRENTRY, then the DIB (header, palette, XOR, AND)."""
    palette = b"".join(struct.pack("<BBBB", b, g, r, 0) for r, g, b in PALETTE)
    palette += b"\0" * (4 * (1 << _BITS) - len(palette))
    xor, mask = _xor_rows(), _and_rows()
    # BITMAPINFOHEADER: the height counts the XOR and AND bitmaps together.
    dib = (
        struct.pack(
            "<IiiHHIIiiII",
            40,
            SIZE,
            2 * SIZE,
            1,
            _BITS,
            0,
            len(xor) + len(mask),
            0,
            0,
            1 << _BITS,
            0,
        )
        + palette
        + xor
        + mask
    )
    header = struct.pack("<HHH", 0, 1, 1)
    entry = struct.pack(
        "<BBBBHHII", SIZE, SIZE, 1 << _BITS, 0, 1, _BITS, len(dib), len(header) + 16
    )
    return header + entry + dib


def icon_base64_lines(width: int = 76) -> tuple[str, ...]:
    """The icon as base64 text in lines of `width` characters (for a RUN line to decode)."""
    text = base64.b64encode(icon_bytes()).decode("ascii")
    return tuple(text[i : i + width] for i in range(0, len(text), width))
