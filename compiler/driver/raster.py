"""A tiny rasteriser for charts: an RGB canvas (numpy), filled rectangles, text in a built-in 5x7
bitmap font, and a PNG encoder (zlib, no imaging library). Enough for ``xmge bench --plot``'s
bar chart without a plotting dependency."""

from __future__ import annotations

import struct
import zlib

import numpy as np

# The printable ASCII characters ' ' .. '~' in order, 7 characters each: one per row, top first, a
# base-32 digit whose 5 bits are the row's pixels (16 = the leftmost column).
_FONT = (
    "00000004444404AA00000AAVAVAA4FKE5U4OP248J3CIK8LID44000002488842"
    "842224804LEL40044V4400000C48000V00000000CC01248G0EHJLPHE4C4444E"
    "EH1248VV2421HE26AIV22VGU11HE68GUHHEV124888EHHEHHEEHHF12C0CC0CC0"
    "0CC0C48248G84200V0V008421248EH12404EH1DLLEEHHVHHHUHHUHHUEHGGGHE"
    "SIHHHISVGGUGGVVGGUGGGEHGNHHFHHHVHHHE44444E72222ICHIKOKIHGGGGGGV"
    "HRLLHHHHHPLJHHEHHHHHEUHHUGGGEHHHLIDUHHUKIHFGGE11UV444444HHHHHHE"
    "HHHHHA4HHHLLLAHHA4AHHHHA4444V1248GVE88888E0G84210E22222E4AH0000"
    "000000V840000000E1FHFGGMPHHU00EGGHE11DJHHF00EHVGE698S8880FHHF1E"
    "GGMPHHH40C444E20622ICGGIKOKIC44444E00QLLHH00MPHHH00EHHHE00UHUGG"
    "00FHF1100MPGGG00EGE1U88S889600HHHJD00HHHA400HHLLA00HA4AH00HHF1E"
    "00V248V34484434444444O44244O008L200"
)
GLYPH_W, GLYPH_H = 5, 7
RGB = tuple[int, int, int]


def _glyph(ch: str) -> np.ndarray:
    """``ch``'s 7x5 mask; a character outside printable ASCII draws as ``?``."""
    code = ord(ch) if " " <= ch <= "~" else ord("?")
    rows = _FONT[(code - 32) * GLYPH_H : (code - 31) * GLYPH_H]
    return np.array([[(int(r, 32) >> (4 - x)) & 1 for x in range(GLYPH_W)] for r in rows], bool)


_GLYPHS = {chr(c): _glyph(chr(c)) for c in range(32, 127)}


class Canvas:
    """A white RGB image; drawing clips at its edges."""

    def __init__(self, width: int, height: int) -> None:
        self.pixels = np.full((height, width, 3), 255, np.uint8)

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])

    def rect(self, x: int, y: int, w: int, h: int, color: RGB) -> None:
        x0, y0 = max(0, x), max(0, y)
        x1, y1 = min(self.width, x + w), min(self.height, y + h)
        if x1 > x0 and y1 > y0:
            self.pixels[y0:y1, x0:x1] = color

    def text(self, x: int, y: int, text: str, color: RGB = (0, 0, 0), scale: int = 1) -> int:
        """Draw ``text`` with its top-left corner at (x, y); returns the x after its last character
        (each character takes ``6 * scale`` pixels: the glyph and a one-pixel gap)."""
        for ch in text:
            mask = _GLYPHS.get(ch, _GLYPHS["?"])
            if scale > 1:
                mask = mask.repeat(scale, 0).repeat(scale, 1)
            h, w = mask.shape
            x0, y0 = max(0, x), max(0, y)
            x1, y1 = min(self.width, x + w), min(self.height, y + h)
            if x1 > x0 and y1 > y0:
                region = self.pixels[y0:y1, x0:x1]
                region[mask[y0 - y : y1 - y, x0 - x : x1 - x]] = color
            x += (GLYPH_W + 1) * scale
        return x

    def png(self) -> bytes:
        return encode_png(self.pixels)


def text_width(text: str, scale: int = 1) -> int:
    return len(text) * (GLYPH_W + 1) * scale


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode_png(pixels: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of an ``(height, width, 3)`` uint8 array: every scanline unfiltered (filter
    byte 0), one zlib stream in one IDAT chunk."""
    if pixels.ndim != 3 or pixels.shape[2] != 3 or pixels.dtype != np.uint8:
        raise ValueError(f"a PNG takes (height, width, 3) uint8 pixels, not {pixels.shape} {pixels.dtype}")
    height, width = pixels.shape[:2]
    if not (0 < width < 2**31 and 0 < height < 2**31):
        raise ValueError(f"a PNG of {width}x{height} pixels cannot be written")
    raw = np.zeros((height, 1 + width * 3), np.uint8)
    raw[:, 1:] = pixels.reshape(height, width * 3)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw.tobytes(), 9))
        + _chunk(b"IEND", b"")
    )
