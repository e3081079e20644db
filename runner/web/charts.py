"""Charts drawn on the server as SVG (no JavaScript): cost and tokens per day per job, run
durations, failure rate. ``daily`` aggregates the runs of the last N days; ``bars`` draws one series."""

from __future__ import annotations

from datetime import datetime, timedelta
from html import escape

from runner.store import Store
from runner.store.queries import DayTotals, daily_totals

WIDTH, HEIGHT, PAD = 560, 140, 28


def daily(store: Store, now: datetime, days: int = 14) -> list[DayTotals]:
    return daily_totals(store, (now - timedelta(days=days - 1)).date().isoformat())


def day_axis(now: datetime, days: int = 14) -> list[str]:
    start = (now - timedelta(days=days - 1)).date()
    return [(start + timedelta(days=i)).isoformat() for i in range(days)]


def series(rows: list[DayTotals], axis: list[str], job: str | None, metric: str) -> list[float]:
    """One value per day of ``axis`` for ``job`` (None: every job); metric: cost, tokens, runs,
    failure_rate (%), duration (mean seconds)."""
    out = []
    for day in axis:
        picked = [r for r in rows if r.day == day and (job is None or r.job == job)]
        runs = sum(r.runs for r in picked)
        if metric == "cost":
            out.append(sum(r.cost_usd for r in picked))
        elif metric == "tokens":
            out.append(float(sum(r.tokens for r in picked)))
        elif metric == "runs":
            out.append(float(runs))
        elif metric == "failure_rate":
            out.append(100.0 * sum(r.failed for r in picked) / runs if runs else 0.0)
        else:
            out.append(sum(r.avg_duration_s * r.runs for r in picked) / runs if runs else 0.0)
    return out


def _fmt(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.0f}"
    return f"{value:.2f}".rstrip("0").rstrip(".") or "0"


def bars(values: list[float], labels: list[str], *, title: str, unit: str = "") -> str:
    """A bar chart as an inline SVG, labelled for screen readers (and each bar titled)."""
    top = max(values) if values and max(values) > 0 else 1.0
    n = max(len(values), 1)
    step = (WIDTH - 2 * PAD) / n
    parts = [
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" class="axis"/>',
        f'<text x="{PAD}" y="12" class="label">max {escape(_fmt(top))}{escape(unit)}</text>',
    ]
    for i, (value, label) in enumerate(zip(values, labels, strict=False)):
        h = (HEIGHT - 2 * PAD) * value / top
        x = PAD + i * step + step * 0.1
        y = HEIGHT - PAD - h
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{step * 0.8:.1f}" height="{h:.1f}" class="bar">'
            f"<title>{escape(label)}: {escape(_fmt(value))}{escape(unit)}</title></rect>"
        )
        if i in (0, n - 1) or n <= 7:
            parts.append(f'<text x="{x:.1f}" y="{HEIGHT - 8}" class="label">{escape(label[5:])}</text>')
    parts.append("</svg>")
    return "".join(parts)
