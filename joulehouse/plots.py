"""Scatter, line and bar plots for materialization metadata (matplotlib, PNG for Markdown).

Figures are made with ``matplotlib.figure.Figure`` directly (no pyplot): no
global state and no display backend, so a plot can be drawn in any thread or
process of a Dagster run. matplotlib is imported by the first plot drawn, not with
this module: a process that draws none (a code server, a sensor, a fork server)
does not pay its second of imports.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: Size of a plot (inches at ``DPI``): 640 x 384 pixels.
SIZE_IN = (6.4, 3.84)
DPI = 100


@dataclass(frozen=True)
class Series:
    """Points of one label (e.g. one setting), drawn in one colour."""

    label: str
    xs: Sequence[float]
    ys: Sequence[float]


def new_axes(size_in: tuple[float, float] = SIZE_IN) -> tuple[Figure, Axes]:
    """A new figure of ``size_in`` inches (default the project's size) and its one axes."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=size_in, dpi=DPI, layout="constrained")
    return figure, figure.add_subplot()


def png_bytes(figure: Figure) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def scatter_png(series: Sequence[Series], *, title: str, x_label: str, y_label: str) -> bytes:
    """A PNG scatter plot of ``series``, one colour and legend entry each (non-finite
    points are left out, as matplotlib does)."""
    figure, axes = new_axes()
    for s in series:
        axes.scatter(s.xs, s.ys, label=s.label, alpha=0.8)
    axes.set(title=title, xlabel=x_label, ylabel=y_label)
    axes.grid(alpha=0.3)
    if series:
        axes.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize="small")
    return png_bytes(figure)


def lines_png(series: Sequence[Series], *, title: str, x_label: str, y_label: str) -> bytes:
    """A PNG line plot of ``series`` (xs may be datetimes; a NaN y breaks a line), one colour
    and legend entry each."""
    figure, axes = new_axes()
    for s in series:
        axes.plot(s.xs, s.ys, label=s.label)
    axes.set(title=title, xlabel=x_label, ylabel=y_label)
    axes.grid(alpha=0.3)
    if series:
        axes.legend(fontsize="small")
    figure.autofmt_xdate()
    return png_bytes(figure)


def bars_png(categories: Sequence[str], series: Sequence[Series], *, title: str,
             y_label: str) -> bytes:
    """A PNG of stacked bars: one bar per category (e.g. a day), one coloured part and
    legend entry per series, whose ``ys`` give its value per category (``xs`` unused)."""
    figure, axes = new_axes()
    bottom = [0.0] * len(categories)
    for s in series:
        axes.bar(list(categories), s.ys, bottom=bottom, label=s.label)
        bottom = [b + y for b, y in zip(bottom, s.ys, strict=True)]
    axes.set(title=title, ylabel=y_label)
    axes.grid(alpha=0.3, axis="y")
    if series:
        axes.legend(fontsize="small")
    figure.autofmt_xdate()
    return png_bytes(figure)


def data_uri(png: bytes) -> str:
    """``png`` as a base64 ``data:`` URI, for Markdown or an HTML ``<img>``."""
    return f"data:image/png;base64,{base64.b64encode(png).decode()}"


def markdown_image(png: bytes, alt: str) -> str:
    """Markdown that shows ``png`` inline, as a base64 data URI."""
    return f"![{alt}]({data_uri(png)})"
