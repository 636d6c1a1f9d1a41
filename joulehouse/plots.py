"""Plots for materialization metadata: dependency-free SVG scatter plots, matplotlib line
plots (PNG); both embeddable in Markdown as data URIs."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 480, 300
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 70, 150, 30, 45
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


@dataclass(frozen=True)
class Series:
    """Points of one label (e.g. one setting), drawn in one colour."""

    label: str
    xs: Sequence[float]
    ys: Sequence[float]


def scatter_svg(series: Sequence[Series], *, title: str, x_label: str, y_label: str) -> str:
    """An SVG scatter plot of ``series`` with axes, ticks and a legend."""
    xs = [x for s in series for x in s.xs if math.isfinite(x)]
    ys = [y for s in series for y in s.ys if math.isfinite(y)]
    x_lo, x_hi = _bounds(xs)
    y_lo, y_hi = _bounds(ys)
    plot_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    def px(x: float) -> float:
        return MARGIN_LEFT + (x - x_lo) / (x_hi - x_lo) * plot_w

    def py(y: float) -> float:
        return MARGIN_TOP + plot_h - (y - y_lo) / (y_hi - y_lo) * plot_h

    parts = [
        (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
         f'font-family="sans-serif" font-size="11">'),
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="13">{escape(title)}</text>',
        (f'<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{plot_w}" height="{plot_h}" '
         f'fill="none" stroke="#444"/>'),
    ]
    for tick in _ticks(x_lo, x_hi):
        parts.append(f'<text x="{px(tick):.1f}" y="{MARGIN_TOP + plot_h + 15}" '
                     f'text-anchor="middle">{_fmt(tick)}</text>')
    for tick in _ticks(y_lo, y_hi):
        parts.append(f'<text x="{MARGIN_LEFT - 5}" y="{py(tick) + 4:.1f}" '
                     f'text-anchor="end">{_fmt(tick)}</text>')
    parts.append(f'<text x="{MARGIN_LEFT + plot_w / 2}" y="{HEIGHT - 8}" '
                 f'text-anchor="middle">{escape(x_label)}</text>')
    parts.append(f'<text transform="translate(14,{MARGIN_TOP + plot_h / 2}) rotate(-90)" '
                 f'text-anchor="middle">{escape(y_label)}</text>')
    for i, s in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        for x, y in zip(s.xs, s.ys):
            if math.isfinite(x) and math.isfinite(y):
                parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" '
                             f'fill="{colour}" fill-opacity="0.8"/>')
        legend_y = MARGIN_TOP + 10 + 15 * i
        parts.append(f'<circle cx="{WIDTH - MARGIN_RIGHT + 15}" cy="{legend_y - 4}" r="4" '
                     f'fill="{colour}"/>')
        parts.append(f'<text x="{WIDTH - MARGIN_RIGHT + 24}" y="{legend_y}">'
                     f'{escape(s.label)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def markdown_image(svg: str, alt: str) -> str:
    """Markdown that shows ``svg`` inline, as a base64 data URI."""
    data = base64.b64encode(svg.encode()).decode()
    return f"![{alt}](data:image/svg+xml;base64,{data})"


def _bounds(values: Sequence[float]) -> tuple[float, float]:
    """A padded range covering ``values`` (never empty, never zero-width)."""
    if not values:
        return 0.0, 1.0
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    return lo - pad, hi + pad


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick positions inside ``[lo, hi]``."""
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def lines_png(series: Sequence[Series], *, title: str, x_label: str, y_label: str) -> bytes:
    """A PNG line plot of ``series`` (xs may be datetimes; a NaN y breaks a line), one colour
    and legend entry each, drawn with matplotlib's ``Figure`` (no pyplot: no global state,
    any thread)."""
    from matplotlib.figure import Figure  # imported when a plot is drawn, not at load

    figure = Figure(figsize=(6.4, 3.84), dpi=100, layout="constrained")
    axes = figure.add_subplot()
    for s in series:
        axes.plot(s.xs, s.ys, label=s.label)
    axes.set(title=title, xlabel=x_label, ylabel=y_label)
    axes.grid(alpha=0.3)
    if series:
        axes.legend(fontsize="small")
    figure.autofmt_xdate()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def png_markdown(png: bytes, alt: str) -> str:
    """Markdown that shows ``png`` inline, as a base64 data URI."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"
