"""Line charts as PNG with the standard library alone (zlib + struct): matplotlib is not in the
project's venv, and a benchmark must not need a package for one picture.

``line_charts(path, panels, x_label)`` draws panels side by side, each a titled chart of one or
more series of (x, y) points with axes, tick labels in a 5x7 bitmap font and a legend.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

RGB = tuple[int, int, int]
# 5x7 glyphs: seven rows of five bits, most significant bit leftmost.
FONT: dict[str, tuple[int, ...]] = {
    "0": (14, 17, 19, 21, 25, 17, 14),
    "1": (4, 12, 4, 4, 4, 4, 14),
    "2": (14, 17, 1, 2, 4, 8, 31),
    "3": (31, 2, 4, 2, 1, 17, 14),
    "4": (2, 6, 10, 18, 31, 2, 2),
    "5": (31, 16, 30, 1, 1, 17, 14),
    "6": (6, 8, 16, 30, 17, 17, 14),
    "7": (31, 1, 2, 4, 8, 8, 8),
    "8": (14, 17, 17, 14, 17, 17, 14),
    "9": (14, 17, 17, 15, 1, 2, 12),
    "A": (14, 17, 17, 31, 17, 17, 17),
    "B": (30, 17, 17, 30, 17, 17, 30),
    "C": (14, 17, 16, 16, 16, 17, 14),
    "D": (28, 18, 17, 17, 17, 18, 28),
    "E": (31, 16, 16, 30, 16, 16, 31),
    "F": (31, 16, 16, 30, 16, 16, 16),
    "G": (14, 17, 16, 23, 17, 17, 15),
    "H": (17, 17, 17, 31, 17, 17, 17),
    "I": (14, 4, 4, 4, 4, 4, 14),
    "J": (7, 2, 2, 2, 2, 18, 12),
    "K": (17, 18, 20, 24, 20, 18, 17),
    "L": (16, 16, 16, 16, 16, 16, 31),
    "M": (17, 27, 21, 21, 17, 17, 17),
    "N": (17, 17, 25, 21, 19, 17, 17),
    "O": (14, 17, 17, 17, 17, 17, 14),
    "P": (30, 17, 17, 30, 16, 16, 16),
    "Q": (14, 17, 17, 17, 21, 18, 13),
    "R": (30, 17, 17, 30, 20, 18, 17),
    "S": (15, 16, 16, 14, 1, 1, 30),
    "T": (31, 4, 4, 4, 4, 4, 4),
    "U": (17, 17, 17, 17, 17, 17, 14),
    "V": (17, 17, 17, 17, 17, 10, 4),
    "W": (17, 17, 17, 21, 21, 21, 10),
    "X": (17, 17, 10, 4, 10, 17, 17),
    "Y": (17, 17, 17, 10, 4, 4, 4),
    "Z": (31, 1, 2, 4, 8, 16, 31),
    " ": (0,) * 7,
    ".": (0, 0, 0, 0, 0, 12, 12),
    "-": (0, 0, 0, 31, 0, 0, 0),
    "/": (1, 1, 2, 4, 8, 16, 16),
    "(": (2, 4, 8, 8, 8, 4, 2),
    ")": (8, 4, 2, 2, 2, 4, 8),
}
W, H, PANEL_W, MARGIN = 0, 420, 460, 60


@dataclass(frozen=True)
class Series:
    name: str
    colour: RGB
    points: list[tuple[float, float]]


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.px = bytearray(b"\xff" * (width * height * 3))

    def dot(self, x: int, y: int, colour: RGB, size: int = 1) -> None:
        for dx in range(size):
            for dy in range(size):
                px, py = x + dx, y + dy
                if 0 <= px < self.width and 0 <= py < self.height:
                    i = (py * self.width + px) * 3
                    self.px[i : i + 3] = bytes(colour)

    def line(self, x0: int, y0: int, x1: int, y1: int, colour: RGB, size: int = 1) -> None:
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for s in range(steps + 1):
            self.dot(
                round(x0 + (x1 - x0) * s / steps), round(y0 + (y1 - y0) * s / steps), colour, size
            )

    def text(self, x: int, y: int, text: str, colour: RGB = (0, 0, 0), scale: int = 1) -> None:
        for n, ch in enumerate(text.upper()):
            for row, bits in enumerate(FONT.get(ch, FONT[" "])):
                for col in range(5):
                    if bits & (1 << (4 - col)):
                        self.dot(x + (n * 6 + col) * scale, y + row * scale, colour, scale)

    def png(self) -> bytes:
        raw = b"".join(
            b"\x00" + bytes(self.px[y * self.width * 3 : (y + 1) * self.width * 3])
            for y in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        head = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", head)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


def _label(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:.3g}K"
    return f"{value:.3g}"


def line_charts(
    path: Path, panels: list[tuple[str, list[Series]]], x_label: str, x_ticks: int | None = None
) -> None:
    """``x_ticks``: that many evenly spaced x ticks instead of one per x value (for series whose
    x values differ, as latencies or offered rates of different systems)."""
    canvas = Canvas(PANEL_W * len(panels), H)
    for n, (title, series) in enumerate(panels):
        left, top = n * PANEL_W + MARGIN, 40
        right, bottom = (n + 1) * PANEL_W - 20, H - 60
        xs = [x for s in series for x, _ in s.points]
        ys = [y for s in series for _, y in s.points]
        x_max, y_max = max(xs) or 1.0, (max(ys) or 1.0) * 1.1
        canvas.text(left, 12, title, scale=2)
        canvas.line(left, bottom, right, bottom, (0, 0, 0))
        canvas.line(left, top, left, bottom, (0, 0, 0))
        for i in range(5):
            yv = y_max * i / 4
            y = bottom - round((bottom - top) * i / 4)
            canvas.line(left - 4, y, left, y, (0, 0, 0))
            canvas.line(left + 1, y, right, y, (225, 225, 225))
            canvas.text(left - 8 - 6 * len(_label(yv)), y - 3, _label(yv))
        ticks = (
            sorted(set(xs))
            if x_ticks is None
            else [x_max * i / x_ticks for i in range(x_ticks + 1)]
        )
        for xv in ticks:
            x = left + round((right - left) * xv / x_max)
            canvas.line(x, bottom, x, bottom + 4, (0, 0, 0))
            canvas.text(x - 3 * len(_label(xv)), bottom + 8, _label(xv))
        canvas.text(left + (right - left) // 2 - 3 * len(x_label), bottom + 24, x_label)
        for k, s in enumerate(series):
            pts = [
                (
                    left + round((right - left) * x / x_max),
                    bottom - round((bottom - top) * y / y_max),
                )
                for x, y in s.points
            ]
            for (x0, y0), (x1, y1) in itertools.pairwise(pts):
                canvas.line(x0, y0, x1, y1, s.colour, 2)
            for x, y in pts:
                canvas.dot(x - 2, y - 2, s.colour, 5)
            canvas.dot(left + 12, top + 8 + 14 * k, s.colour, 8)
            canvas.text(left + 26, top + 9 + 14 * k, s.name)
    path.write_bytes(canvas.png())
