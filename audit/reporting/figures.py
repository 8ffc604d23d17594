"""Figures of the report and the notebooks: ROC curves (linear or log-log), image grids; PNG bytes.

Everything draws on figures it makes itself (`matplotlib.figure.Figure`, saved through the Agg
canvas), never through pyplot: nothing here needs a display, switches the backend a notebook or
program is using, or leaves a figure open behind.
"""

from __future__ import annotations

import base64
import io
from typing import Mapping, Sequence

import numpy as np

from audit.stats.metrics import auc, roc

SCALES = ("log", "linear")


def _figure(**kwargs):
    """A figure of its own, known to no pyplot state and no backend."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def plot_roc(ax, curves: Mapping[str, tuple[np.ndarray, np.ndarray]], *, scale: str = "log", title: str = "") -> None:
    """Draw one ROC curve per entry of `curves` (label -> (member scores, non-member scores)) on
    `ax`, with the chance diagonal. On the log-log scale rates are floored at 1 / (non-members)
    of the largest curve, the smallest FPR any curve can resolve."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    floor = 1 / max(max((len(n) for _, n in curves.values()), default=1), 1) if scale == "log" else 0.0
    for label, (member, nonmember) in curves.items():
        fpr, tpr = roc(member, nonmember)
        ax.plot(
            np.maximum(fpr, floor), np.maximum(tpr, floor), lw=1.4, label=f"{label} (AUC {auc(member, nonmember):.3f})"
        )
    low = floor if scale == "log" else 0.0
    ax.plot([low, 1], [low, 1], "k--", lw=0.8, label="chance")
    if scale == "log":
        ax.set(xscale="log", yscale="log")
        _plain_decades(ax)
    ax.set(xlim=(low, 1), ylim=(low, 1), xlabel="false positive rate", ylabel="true positive rate")
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(loc="lower right", fontsize=7)
    ax.grid(True, which="major", alpha=0.3)


def _plain_decades(ax) -> None:
    """Log axes labelled at their decades in plain numbers (0.01, 0.1, 1), without minor ticks (mathtext
    labels and minor ticks were most of the time an audit's figure took to draw)."""
    from matplotlib.ticker import FuncFormatter

    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.minorticks_off()


def roc_png(curves: Mapping[str, tuple[np.ndarray, np.ndarray]], *, title: str = "", scale: str = "log") -> bytes:
    """`plot_roc` on a figure of its own, as PNG bytes, its margins fixed (room for the axis labels
    and a one-line title) rather than measured by a second drawing."""
    fig = _figure(figsize=(4.6, 4.6), dpi=100)
    plot_roc(fig.subplots(), curves, scale=scale, title=title)
    fig.subplots_adjust(left=0.15, bottom=0.1, right=0.97, top=0.94)
    return _png(fig, tight=False)


def to_display(images: np.ndarray) -> np.ndarray:
    """Images [k, c, h, w] or [k, h, w] at pixel scale -> [k, h, w] (grey) or [k, h, w, 3], clipped to [0, 1]."""
    images = np.asarray(images, dtype=np.float32)
    if images.ndim == 3:
        return np.clip(images, 0, 1)
    if images.ndim != 4 or images.shape[1] not in (1, 3):
        raise ValueError(f"images must be [k, h, w] or [k, c, h, w] with 1 or 3 channels, got {images.shape}")
    images = images[:, 0] if images.shape[1] == 1 else images.transpose(0, 2, 3, 1)
    return np.clip(images, 0, 1)


def image_grid_png(
    images: np.ndarray, captions: Sequence[str], *, columns: int = 10, size: float = 0.9, title: str = ""
) -> bytes:
    """A grid of images (pixel scale, clipped to [0, 1] for display), each in a cell `size` inches wide
    (a quarter of the image's width apart) under its caption (a band of 0.25 inches). One axes holds
    them all: an axes per image costs far more to make and draw than the image itself."""
    shown = to_display(images)
    if len(shown) != len(captions):
        raise ValueError(f"{len(shown)} images but {len(captions)} captions")
    if len(shown) == 0:
        raise ValueError("no images to show")
    columns = max(1, min(columns, len(shown)))
    rows = -(-len(shown) // columns)
    height, width = shown.shape[1:3]
    unit = size / (1.25 * width)  # inches per pixel: an image and a gap of a quarter of it fill `size`
    band = 0.25 / unit  # the caption's band, in pixels
    cell_w, cell_h = 1.25 * width, 1.25 * height + band
    fig = _figure(figsize=(columns * size, rows * cell_h * unit), dpi=100)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.axis("off")
    for i, (image, caption) in enumerate(zip(shown, captions)):
        left, top = (i % columns) * cell_w, (i // columns) * cell_h + band
        ax.imshow(
            image,
            cmap="gray" if image.ndim == 2 else None,
            vmin=0,
            vmax=1,
            interpolation="nearest",
            extent=(left, left + width, top + height, top),
        )
        ax.text(left + width / 2, top - 0.02 / unit, caption, ha="center", va="bottom", fontsize=7)
    ax.set(xlim=(-0.125 * width, columns * cell_w - 0.125 * width), ylim=(rows * cell_h, 0), aspect="equal")
    if title:
        ax.set_title(title, fontsize=9)
    return _png(fig)


def data_uri(png: bytes) -> str:
    """PNG bytes as a `data:` URI, for a self-contained HTML page."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _png(fig, *, tight: bool = True) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight" if tight else None)
    return buf.getvalue()
