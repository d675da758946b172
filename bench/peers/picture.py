"""The peer benchmarks' picture: kstage beside a peer, drawn by the run itself as SVG.

Two panels, one line per system (:class:`figures.Figures` of its freshness run):

* **freshness**: the share of the counted events visible to a reader within ``x`` ms of
  their send (the distribution whose p50/p99 the report prints), up to the largest p99
  of the systems and half as much again;
* **data files**: the data files of the system's table over its freshness run (its
  current snapshot's ``total-data-files`` each time it changed), seconds from the first
  event.

Plain SVG written here (a few dozen lines; no plotting library to install for a
benchmark), so a browser or GitHub shows it and docs/benchmarks.md links it.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

from figures import Figures

WIDTH, HEIGHT = 960, 440
PANEL_W, PANEL_H = 380, 260
LEFTS = (80, 560)  # the panels' left edges
TOP = 70
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def _nice(value: float) -> float:
    """The least of 1, 2, 2.5, 5 times a power of ten, times 4 (the ticks), at least
    ``value``: an axis's end whose ticks are round numbers."""
    step = value / 4
    power = 10.0 ** math.floor(math.log10(step)) if step > 0 else 1.0
    for mult in (1, 2, 2.5, 5, 10):
        if mult * power >= step:
            return 4 * mult * power
    return 4 * 10 * power


def _polyline(points: list[tuple[float, float]], colour: str) -> str:
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>'


def _axes(left: int, title: str, x_label: str, y_label: str, x_max: float,
          y_max: float) -> list[str]:
    bottom = TOP + PANEL_H
    parts = [f'<rect x="{left}" y="{TOP}" width="{PANEL_W}" height="{PANEL_H}" '
             'fill="none" stroke="#888"/>',
             f'<text x="{left + PANEL_W / 2}" y="{TOP - 12}" text-anchor="middle" '
             f'font-weight="bold">{escape(title)}</text>',
             f'<text x="{left + PANEL_W / 2}" y="{bottom + 38}" '
             f'text-anchor="middle">{escape(x_label)}</text>',
             f'<text x="{left - 50}" y="{TOP + PANEL_H / 2}" text-anchor="middle" '
             f'transform="rotate(-90 {left - 50} {TOP + PANEL_H / 2})">{escape(y_label)}</text>']
    for i in range(5):
        x = left + PANEL_W * i / 4
        y = bottom - PANEL_H * i / 4
        parts.append(f'<text x="{x:.0f}" y="{bottom + 16}" text-anchor="middle" '
                     f'font-size="11">{x_max * i / 4:g}</text>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.0f}" text-anchor="end" '
                     f'font-size="11">{y_max * i / 4:g}</text>')
    return parts


def svg(systems: list[Figures], title: str) -> str:
    """The picture of ``systems`` (kstage first), under ``title``."""
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             'font-family="sans-serif" font-size="13">',
             f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
             f'<text x="{WIDTH / 2}" y="24" text-anchor="middle" font-size="15">'
             f'{escape(title)}</text>']
    ms_max = _nice(max([f.p99_ms for f in systems] + [1.0]) * 1.5)
    s_max = _nice(max([at for f in systems for at, _ in f.files_at] + [1.0]))
    files_max = _nice(max([n for f in systems for _, n in f.files_at] + [1]))
    parts += _axes(LEFTS[0], "freshness", "ms from send to visible",
                   "share of events", ms_max, 1.0)
    parts += _axes(LEFTS[1], "data files in the table", "s from the first event",
                   "data files", s_max, float(files_max))
    bottom = TOP + PANEL_H
    for i, f in enumerate(systems):
        colour = COLOURS[i % len(COLOURS)]
        ordered = sorted(f.latencies_ms)
        step = max(1, len(ordered) // 400)  # at most ~400 points a line
        cdf = [(LEFTS[0] + PANEL_W * min(ms, ms_max) / ms_max,
                bottom - PANEL_H * (k + 1) / len(ordered))
               for k, ms in enumerate(ordered) if k % step == 0 or k == len(ordered) - 1]
        if cdf:
            parts.append(_polyline(cdf, colour))
        steps: list[tuple[float, float]] = []
        for at, n in f.files_at:
            x = LEFTS[1] + PANEL_W * at / s_max
            y = bottom - PANEL_H * n / files_max
            if steps:
                steps.append((x, steps[-1][1]))
            steps.append((x, y))
        if steps:
            parts.append(_polyline(steps, colour))
        legend = (f"{f.system}: p50 {f.p50_ms:.0f} ms, p99 {f.p99_ms:.0f} ms at "
                  f"{f.rate:.0f} events/s; {f.fresh_files} data files at the end "
                  f"({f.fresh_files_100k:.1f} per 100k events)")
        parts.append(f'<text x="{LEFTS[0]}" y="{bottom + 62 + 18 * i}" fill="{colour}">'
                     f'{escape(legend)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def draw(systems: list[Figures], title: str, path: Path) -> None:
    """Write the picture to ``path`` (its directory made) and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(svg(systems, title), encoding="utf-8")
    print(f"picture: {path}", flush=True)
