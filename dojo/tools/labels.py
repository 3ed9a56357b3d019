"""Moving a plot's point labels so that none covers a marker or another label.

`place_labels(fig)` takes a drawn matplotlib Figure (solutions.roofline.plot_roofline's) and, label by
label, keeps the nearest offset whose text box clears every marker and every label already placed; a
label that moved far gets a leader line. `overlaps(fig)` lists what still collides (the tests use it).
"""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox

PAD_PX = 3.0  # clearance around a text box, in pixels
STEP_PT = 9.0  # distance between candidate rings, in points
RINGS = 8


def _renderer(fig: Figure):
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    return canvas.get_renderer()


def marker_boxes(fig: Figure) -> list[Bbox]:
    """The display-space box of every marker drawn on the figure's axes (lines of single points
    drawn with a marker)."""
    boxes = []
    for ax in fig.axes:
        for line in ax.get_lines():
            if line.get_marker() in (None, "None", "", " "):
                continue
            half = line.get_markersize() * fig.dpi / 72 / 2 + 1
            for x, y in ax.transData.transform(line.get_xydata()):
                boxes.append(Bbox.from_extents(x - half, y - half, x + half, y + half))
    return boxes


def _text_box(text: Text, renderer, pad: float = PAD_PX) -> Bbox:
    """The box of the text alone (an Annotation's own extent includes its leader line)."""
    if isinstance(text, Annotation):
        text.update_positions(renderer)
    return Text.get_window_extent(text, renderer).padded(pad)


def _candidates() -> list[tuple[float, float, str, str]]:
    """(dx, dy) offsets in points with the alignment that puts the text on that side, nearest first."""
    found = []
    for ring in range(1, RINGS + 1):
        r = STEP_PT * ring
        found += [
            (0, r, "center", "bottom"),
            (r, 0, "left", "center"),
            (0, -r, "center", "top"),
            (-r, 0, "right", "center"),
            (r, r, "left", "bottom"),
            (r, -r, "left", "top"),
            (-r, r, "right", "bottom"),
            (-r, -r, "right", "top"),
        ]
    return found


def place_labels(fig: Figure) -> None:
    """Move each annotation of `fig` to the nearest offset where it covers no marker and no label
    placed before it, and stays inside the figure; one moved beyond the first ring gets a leader
    line. A label with no free offset stays where it was."""
    renderer = _renderer(fig)
    markers = marker_boxes(fig)
    placed: list[Bbox] = []
    for ax in fig.axes:
        for text in [t for t in ax.texts if isinstance(t, Annotation)]:
            original = (text.xyann, text.get_ha(), text.get_va())
            for dx, dy, ha, va in _candidates():
                text.xyann = (dx, dy)
                text.set_ha(ha)
                text.set_va(va)
                box = _text_box(text, renderer)
                inside = (
                    fig.bbox.x0 <= box.x0
                    and box.x1 <= fig.bbox.x1
                    and fig.bbox.y0 <= box.y0
                    and box.y1 <= fig.bbox.y1
                )
                if inside and not any(box.overlaps(b) for b in markers + placed):
                    placed.append(box)
                    if max(abs(dx), abs(dy)) > STEP_PT:
                        _lead(ax, text)
                    break
            else:
                text.xyann = original[0]
                text.set_ha(original[1])
                text.set_va(original[2])
                placed.append(_text_box(text, renderer))


def _lead(ax, text: Annotation) -> None:
    """Redraw `text` with a thin gray line back to its point (an Annotation takes arrowprops only when made)."""
    ax.annotate(
        text.get_text(),
        text.xy,
        xytext=text.xyann,
        textcoords="offset points",
        ha=text.get_ha(),
        va=text.get_va(),
        color=text.get_color(),
        fontsize=text.get_fontsize(),
        arrowprops={"arrowstyle": "-", "color": "gray", "lw": 0.6, "shrinkA": 2, "shrinkB": 6},
    )
    text.remove()


def overlaps(fig: Figure) -> list[str]:
    """Each collision left on `fig`: a label over a marker, or two labels over each other."""
    renderer = _renderer(fig)
    markers = marker_boxes(fig)
    texts = [t for ax in fig.axes for t in ax.texts]
    boxes = [_text_box(t, renderer, pad=0) for t in texts]
    found = [
        f"{t.get_text()!r} covers a marker"
        for t, box in zip(texts, boxes)
        if any(box.overlaps(m) for m in markers)
    ]
    for i, (a, box_a) in enumerate(zip(texts, boxes)):
        found += [
            f"{a.get_text()!r} covers {b.get_text()!r}"
            for b, box_b in zip(texts[i + 1 :], boxes[i + 1 :])
            if box_a.overlaps(box_b)
        ]
    return found
