"""Line charts as inline SVG (no script, no external file): a learner's curves on the run page."""

from __future__ import annotations

import math
from html import escape
from typing import Any

WIDTH, HEIGHT, PAD = 320, 120, 28
COLOURS = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1")


def _finite(values: list[Any]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def line_chart(title: str, steps: list[int], lines: dict[str, list[Any]]) -> str:
    """An SVG chart of one or more aligned series over `steps` (gaps where a value is None); a note when empty."""
    drawn = {name: values for name, values in lines.items() if _finite(values)}
    head = (
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
        f'<text x="{PAD}" y="12" class="t">{escape(title)}</text>'
    )
    if not drawn or len(steps) < 1:
        return head + f'<text x="{PAD}" y="{HEIGHT // 2}" class="n">no data yet</text></svg>'
    every = [v for values in drawn.values() for v in _finite(values)]
    low, high = min(every), max(every)
    if high - low < 1e-12:
        low, high = low - 0.5, high + 0.5
    first, last = min(steps), max(steps)
    span = max(1, last - first)
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD

    def x(step: int) -> float:
        return PAD + (step - first) / span * inner_w

    def y(value: float) -> float:
        return PAD + (1 - (value - low) / (high - low)) * inner_h

    parts = [
        head,
        f'<rect x="{PAD}" y="{PAD}" width="{inner_w}" height="{inner_h}" class="f"/>',
        f'<text x="2" y="{PAD + 4}" class="a">{_fmt(high)}</text>',
        f'<text x="2" y="{PAD + inner_h}" class="a">{_fmt(low)}</text>',
        f'<text x="{PAD}" y="{HEIGHT - 6}" class="a">step {first}</text>',
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - 6}" class="a" text-anchor="end">{last}</text>',
    ]
    for i, (name, values) in enumerate(drawn.items()):
        colour = COLOURS[i % len(COLOURS)]
        runs: list[list[str]] = [[]]
        for step, value in zip(steps, values, strict=False):
            if isinstance(value, (int, float)) and math.isfinite(value):
                runs[-1].append(f"{x(step):.1f},{y(float(value)):.1f}")
            elif runs[-1]:
                runs.append([])
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{colour}"/>')
            elif run:
                parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{" ".join(run)}"/>')
        if len(drawn) > 1:
            parts.append(
                f'<text x="{WIDTH - PAD - 70 * (len(drawn) - 1 - i)}" y="12" class="a" fill="{colour}" '
                f'text-anchor="end">{escape(name)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)
