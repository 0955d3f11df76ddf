"""Small PNG charts (latency against offered load, latency over time), no plotting library.

An RGB canvas, lines, markers and a 5x7 bitmap font (upper case, digits and a little
punctuation), written as a PNG with zlib. Enough for docs/img/relay_latency.png.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

Color = tuple[int, int, int]

WHITE: Color = (255, 255, 255)
BLACK: Color = (0, 0, 0)
GREY: Color = (215, 215, 215)
DARK: Color = (90, 90, 90)
RED: Color = (200, 40, 40)
PALETTE: list[Color] = [
    (31, 119, 180),
    (230, 120, 20),
    (44, 160, 44),
    (148, 103, 189),
    (140, 86, 75),
    (23, 190, 207),
]

_GLYPHS: dict[str, str] = {
    "A": "01110 10001 10001 11111 10001 10001 10001",
    "B": "11110 10001 10001 11110 10001 10001 11110",
    "C": "01110 10001 10000 10000 10000 10001 01110",
    "D": "11100 10010 10001 10001 10001 10010 11100",
    "E": "11111 10000 10000 11110 10000 10000 11111",
    "F": "11111 10000 10000 11110 10000 10000 10000",
    "G": "01110 10001 10000 10111 10001 10001 01111",
    "H": "10001 10001 10001 11111 10001 10001 10001",
    "I": "01110 00100 00100 00100 00100 00100 01110",
    "J": "00111 00010 00010 00010 00010 10010 01100",
    "K": "10001 10010 10100 11000 10100 10010 10001",
    "L": "10000 10000 10000 10000 10000 10000 11111",
    "M": "10001 11011 10101 10101 10001 10001 10001",
    "N": "10001 10001 11001 10101 10011 10001 10001",
    "O": "01110 10001 10001 10001 10001 10001 01110",
    "P": "11110 10001 10001 11110 10000 10000 10000",
    "Q": "01110 10001 10001 10001 10101 10010 01101",
    "R": "11110 10001 10001 11110 10100 10010 10001",
    "S": "01111 10000 10000 01110 00001 00001 11110",
    "T": "11111 00100 00100 00100 00100 00100 00100",
    "U": "10001 10001 10001 10001 10001 10001 01110",
    "V": "10001 10001 10001 10001 10001 01010 00100",
    "W": "10001 10001 10001 10101 10101 10101 01010",
    "X": "10001 10001 01010 00100 01010 10001 10001",
    "Y": "10001 10001 10001 01010 00100 00100 00100",
    "Z": "11111 00001 00010 00100 01000 10000 11111",
    "0": "01110 10001 10011 10101 11001 10001 01110",
    "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111",
    "3": "11111 00010 00100 00010 00001 10001 01110",
    "4": "00010 00110 01010 10010 11111 00010 00010",
    "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110",
    "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110",
    "9": "01110 10001 10001 01111 00001 00010 01100",
    " ": "00000 00000 00000 00000 00000 00000 00000",
    "(": "00010 00100 01000 01000 01000 00100 00010",
    ")": "01000 00100 00010 00010 00010 00100 01000",
    ".": "00000 00000 00000 00000 00000 01100 01100",
    ",": "00000 00000 00000 00000 01100 00100 01000",
    "/": "00000 00001 00010 00100 01000 10000 00000",
    "-": "00000 00000 00000 11111 00000 00000 00000",
    ":": "00000 01100 01100 00000 01100 01100 00000",
    "%": "11000 11001 00010 00100 01000 10011 00011",
    "=": "00000 00000 11111 00000 11111 00000 00000",
    "+": "00000 00100 00100 11111 00100 00100 00000",
    "<": "00010 00100 01000 10000 01000 00100 00010",
    ">": "01000 00100 00010 00001 00010 00100 01000",
}
_FONT: dict[str, list[str]] = {c: rows.split() for c, rows in _GLYPHS.items()}


class Canvas:
    def __init__(self, width: int, height: int, background: Color = WHITE) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def set(self, x: int, y: int, color: Color) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            i = 3 * (y * self.width + x)
            self.pixels[i : i + 3] = bytes(color)

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        for y in range(max(0, y0), min(self.height, y1 + 1)):
            for x in range(max(0, x0), min(self.width, x1 + 1)):
                self.set(x, y, color)

    def line(
        self,
        x0: float,
        y0: float,
        x1: float,
        y1: float,
        color: Color,
        width: int = 1,
        dash: int = 0,
    ) -> None:
        """A line of the given width; dash > 0 draws dash pixels on, dash pixels off."""
        steps = max(1, int(max(abs(x1 - x0), abs(y1 - y0))))
        half = width // 2
        for i in range(steps + 1):
            if dash and (i // dash) % 2:
                continue
            x = round(x0 + (x1 - x0) * i / steps)
            y = round(y0 + (y1 - y0) * i / steps)
            self.rect(x - half, y - half, x - half + width - 1, y - half + width - 1, color)

    def text(self, x: int, y: int, text: str, color: Color = BLACK, scale: int = 2) -> int:
        """Draws text with its top-left corner at (x, y); returns the x after it."""
        for ch in text.upper():
            rows = _FONT.get(ch, _FONT[" "])
            for r, bits in enumerate(rows):
                for c, bit in enumerate(bits):
                    if bit == "1":
                        self.rect(
                            x + c * scale,
                            y + r * scale,
                            x + (c + 1) * scale - 1,
                            y + (r + 1) * scale - 1,
                            color,
                        )
            x += 6 * scale
        return x

    @staticmethod
    def text_width(text: str, scale: int = 2) -> int:
        return 6 * scale * len(text) - scale

    def png(self) -> bytes:
        raw = b"".join(
            b"\x00" + bytes(self.pixels[3 * y * self.width : 3 * (y + 1) * self.width])
            for y in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


def _nice_log_bounds(values: Sequence[float]) -> tuple[float, float]:
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    if not finite:
        return 1.0, 1000.0
    low = 10 ** math.floor(math.log10(min(finite)))
    high = 10 ** math.ceil(math.log10(max(finite)))
    if high <= low:
        high = low * 10
    return low, high


Area = tuple[int, int, int, int]  # left, top, width, height of the plotting area


def _log_ms_axis(
    canvas: Canvas, area: Area, y_lo: float, y_hi: float, minor_ticks: bool
) -> Callable[[float], float]:
    """Draw the log-scale latency axis's decade lines and labels (and the ticks between
    them); returns the y pixel of a value in ms, clamped to the axis."""
    left, top, plot_w, plot_h = area

    def py(y: float) -> float:
        y = min(max(y, y_lo), y_hi)
        frac = (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo))
        return top + plot_h * (1 - frac)

    decade = y_lo
    while decade <= y_hi * 1.0001:
        y = round(py(decade))
        canvas.line(left, y, left + plot_w, y, GREY)
        label = f"{decade:g}"
        canvas.text(left - 12 - Canvas.text_width(label), y - 7, label)
        if minor_ticks:
            for k in range(2, 10):
                minor = decade * k
                if minor < y_hi:
                    canvas.line(left - 4, round(py(minor)), left, round(py(minor)), DARK)
        decade *= 10
    return py


def _frame(canvas: Canvas, area: Area, xlabel: str) -> None:
    """The two axes, the x axis's label and the latency axis's unit."""
    left, top, plot_w, plot_h = area
    canvas.line(left, top, left, top + plot_h, BLACK, 2)
    canvas.line(left, top + plot_h, left + plot_w, top + plot_h, BLACK, 2)
    canvas.text(left + (plot_w - Canvas.text_width(xlabel)) // 2, top + plot_h + 34, xlabel)
    canvas.text(8, top - 26, "MS (LOG)")


def latency_plot(
    path: Path,
    rows: Sequence[tuple[str, float, float, float]],
    target_ms: float | None = 50.0,
    target_at: float | None = 2000.0,
    title: str = "END-TO-END LATENCY (COMMIT TO CONSUMER) VS OFFERED LOAD",
) -> None:
    """rows: (series label, offered events/s, p50 ms, p99 ms). Log-scale latency axis."""
    width, height = 960, 600
    left, right, top, bottom = 110, 40, 60, 150
    canvas = Canvas(width, height)
    plot_w, plot_h = width - left - right, height - top - bottom
    offered = sorted({r[1] for r in rows})
    x_max = max(offered) * 1.08 if offered else 1.0
    y_lo, y_hi = _nice_log_bounds([v for r in rows for v in (r[2], r[3])] + [target_ms or 0.0])

    def px(x: float) -> float:
        return left + plot_w * x / x_max

    canvas.text((width - Canvas.text_width(title)) // 2, 18, title)
    py = _log_ms_axis(canvas, (left, top, plot_w, plot_h), y_lo, y_hi, minor_ticks=True)
    for x in offered:
        xp = round(px(x))
        canvas.line(xp, top, xp, top + plot_h, GREY)
        label = f"{x:,.0f}"
        canvas.text(xp - Canvas.text_width(label) // 2, top + plot_h + 10, label)
    _frame(canvas, (left, top, plot_w, plot_h), "OFFERED LOAD (EVENTS/S)")
    if target_ms is not None:
        y = round(py(target_ms))
        canvas.line(left, y, left + plot_w, y, RED, 1, dash=6)
        note = f"TARGET: P99 <= {target_ms:g} MS" + (f" AT {target_at:,.0f}/S" if target_at else "")
        canvas.text(left + plot_w - Canvas.text_width(note) - 6, y - 20, note, RED)
        if target_at:
            canvas.rect(round(px(target_at)) - 4, y - 4, round(px(target_at)) + 4, y + 4, RED)
    series = sorted({r[0] for r in rows}, key=lambda s: [r[0] for r in rows].index(s))
    legend_y = top + plot_h + 66
    legend_x = left
    for n, name in enumerate(series):
        color = PALETTE[n % len(PALETTE)]
        points = sorted((r[1], r[2], r[3]) for r in rows if r[0] == name)
        for index, dash in ((1, 5), (2, 0)):
            prev: tuple[float, float] | None = None
            for p in points:
                value = p[index]
                if not (value > 0 and math.isfinite(value)):
                    prev = None
                    continue
                here = (px(p[0]), py(value))
                if prev is not None:
                    canvas.line(prev[0], prev[1], here[0], here[1], color, 3, dash=dash)
                size = 5 if index == 2 else 4
                canvas.rect(
                    round(here[0]) - size,
                    round(here[1]) - size,
                    round(here[0]) + size,
                    round(here[1]) + size,
                    color,
                )
                prev = here
        for k, (kind, dash) in enumerate((("P99", 0), ("P50", 5))):
            y = legend_y + 26 * k
            canvas.line(legend_x, y + 7, legend_x + 40, y + 7, color, 3, dash=dash)
            canvas.text(legend_x + 50, y, f"{name} {kind}", color)
        legend_x += 440
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(canvas.png())


def timeline_plot(
    path: Path,
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    title: str,
    xlabel: str = "SECONDS SINCE THE FIRST COMMIT",
    reference: tuple[str, float] | None = None,
) -> None:
    """series: (label, [(seconds, latency ms), ...]): one dot per event, on a log-scale
    latency axis against time; reference: a labelled dashed line (a bar to meet)."""
    width, height = 960, 600
    left, right, top, bottom = 110, 40, 60, 130
    canvas = Canvas(width, height)
    plot_w, plot_h = width - left - right, height - top - bottom
    xs = [t for _, points in series for t, _ in points]
    x_max = max(xs) * 1.02 if xs and max(xs) > 0 else 1.0
    values = [v for _, points in series for _, v in points]
    y_lo, y_hi = _nice_log_bounds(values + ([reference[1]] if reference else []))

    def px(x: float) -> float:
        return left + plot_w * min(max(x, 0.0), x_max) / x_max

    canvas.text((width - Canvas.text_width(title)) // 2, 18, title)
    py = _log_ms_axis(canvas, (left, top, plot_w, plot_h), y_lo, y_hi, minor_ticks=False)
    step = 10 ** math.floor(math.log10(x_max)) if x_max >= 1 else 0.1
    if x_max / step < 4:
        step /= 2
    tick = 0.0
    while tick <= x_max:
        xp = round(px(tick))
        canvas.line(xp, top, xp, top + plot_h, GREY)
        label = f"{tick:g}"
        canvas.text(xp - Canvas.text_width(label) // 2, top + plot_h + 10, label)
        tick += step
    _frame(canvas, (left, top, plot_w, plot_h), xlabel)
    if reference is not None:
        note, value = reference
        y = round(py(value))
        canvas.line(left, y, left + plot_w, y, RED, 1, dash=6)
    legend_x, legend_y = left, top + plot_h + 66
    for n, (name, points) in enumerate(series):
        color = PALETTE[n % len(PALETTE)]
        for t, value in points:
            if value > 0 and math.isfinite(value):
                x, y = round(px(t)), round(py(value))
                canvas.rect(x - 1, y - 1, x + 1, y + 1, color)
        canvas.rect(legend_x, legend_y + 2, legend_x + 10, legend_y + 12, color)
        legend_x = canvas.text(legend_x + 18, legend_y, name, color) + 30
    if reference is not None:  # over the dots, on a box of its own
        note, value = reference
        y = round(py(value))
        canvas.rect(left + 4, y + 4, left + Canvas.text_width(note) + 12, y + 24, WHITE)
        canvas.text(left + 8, y + 7, note, RED)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(canvas.png())
