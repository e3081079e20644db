"""Charts drawn on the server as SVG (no JavaScript): cost and tokens per day per job, run
durations, failure rate, runs by status. ``daily`` aggregates the runs of the last N days; ``bars``
draws one series, ``stacked`` several (runs by status); money is labelled to the cent."""

from __future__ import annotations

from datetime import datetime, timedelta
from html import escape

from runner.statuses import RunStatus
from runner.store import Store
from runner.store.queries import FAILURES, DayStatus, DayTotals, daily_statuses, daily_totals

WIDTH, HEIGHT, PAD = 560, 140, 28


def daily(store: Store, now: datetime, days: int = 14) -> list[DayTotals]:
    return daily_totals(store, (now - timedelta(days=days - 1)).date().isoformat())


def statuses(store: Store, now: datetime, days: int = 14) -> list[DayStatus]:
    return daily_statuses(store, (now - timedelta(days=days - 1)).date().isoformat())


#: the runs-by-status chart's groups, bottom to top: (css class, label, statuses)
STATUS_GROUPS: tuple[tuple[str, str, frozenset[RunStatus]], ...] = (
    ("st-succeeded", "succeeded", frozenset({RunStatus.SUCCEEDED})),
    ("st-failed", "failed", frozenset(FAILURES)),
    ("st-other", "other", frozenset(set(RunStatus) - {RunStatus.SUCCEEDED} - set(FAILURES))),
)


def status_series(rows: list[DayStatus], axis: list[str]) -> list[list[float]]:
    """One series per ``STATUS_GROUPS`` entry: its runs per day of ``axis``."""
    return [
        [float(sum(r.runs for r in rows if r.day == day and r.status in members)) for day in axis]
        for _, _, members in STATUS_GROUPS
    ]


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


def usd(value: float) -> str:
    """Money to the cent (``$12.35``); a cost under a cent keeps four decimals (``$0.0042``)."""
    if 0 < abs(value) < 0.01:
        return f"${value:.4f}"
    return f"${value:,.2f}"


def _fmt(value: float, unit: str = "") -> str:
    """A chart label: money to the cent, other numbers to 2 significant decimals, then ``unit``."""
    if unit == USD:
        return usd(value)
    if value >= 1000:
        text = f"{value:,.0f}"
    elif value >= 10:
        text = f"{value:.0f}"
    else:
        text = f"{value:.2f}".rstrip("0").rstrip(".") or "0"
    return text + unit


USD = " USD"  # the unit of money series: labelled $X.XX


def _frame(title: str, top_label: str) -> list[str]:
    """The start of a chart's SVG: its accessible title, the axis and the label of its top value."""
    return [
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" class="axis"/>',
        f'<text x="{PAD}" y="12" class="label">{escape(top_label)}</text>',
    ]


def _day_label(x: float, label: str) -> str:
    """A bar's day under the axis (the date without its year)."""
    return f'<text x="{x:.1f}" y="{HEIGHT - 8}" class="label">{escape(label[5:])}</text>'


def bars(values: list[float], labels: list[str], *, title: str, unit: str = "") -> str:
    """A bar chart as an inline SVG, labelled for screen readers (and each bar titled)."""
    top = max(values) if values and max(values) > 0 else 1.0
    n = max(len(values), 1)
    step = (WIDTH - 2 * PAD) / n
    parts = _frame(title, f"max {_fmt(max(values, default=0.0), unit)}")
    for i, (value, label) in enumerate(zip(values, labels, strict=False)):
        h = (HEIGHT - 2 * PAD) * value / top
        x = PAD + i * step + step * 0.1
        y = HEIGHT - PAD - h
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{step * 0.8:.1f}" height="{h:.1f}" class="bar">'
            f"<title>{escape(label)}: {escape(_fmt(value, unit))}</title></rect>"
        )
        if i in (0, n - 1) or n <= 7:
            parts.append(_day_label(x, label))
    parts.append("</svg>")
    return "".join(parts)


def stacked(series: list[list[float]], classes: list[str], names: list[str], labels: list[str], *, title: str) -> str:
    """Stacked bars (one stack per label, one part per series, bottom first), each part titled."""
    totals = [sum(col) for col in zip(*series, strict=True)] if series else []
    top = max(totals) if totals and max(totals) > 0 else 1.0
    n = max(len(labels), 1)
    step = (WIDTH - 2 * PAD) / n
    parts = _frame(title, f"max {_fmt(max(totals, default=0.0))} runs a day")
    for i, label in enumerate(labels):
        x = PAD + i * step + step * 0.1
        base = float(HEIGHT - PAD)
        for values, cls, name in zip(series, classes, names, strict=True):
            value = values[i]
            if value <= 0:
                continue
            h = (HEIGHT - 2 * PAD) * value / top
            base -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{base:.1f}" width="{step * 0.8:.1f}" height="{h:.1f}" class="bar {escape(cls)}">'
                f"<title>{escape(label)}: {escape(_fmt(value))} {escape(name)}</title></rect>"
            )
        if i in (0, n - 1) or n <= 7:
            parts.append(_day_label(x, label))
    parts.append("</svg>")
    return "".join(parts)
