"""Altair charts of the dashboard: 24-hour time axes with dates, outliers marked but not
allowed to set the scale."""

from __future__ import annotations

import altair as alt
import pandas as pd

TIME = alt.Axis(format="%Y-%m-%d %H:%M", labelAngle=-30, title=None)


def outliers(values: pd.Series) -> pd.Series:
    """True for points far above the rest (a cold start): beyond Q3 + 3 IQR."""
    q1, q3 = values.quantile(0.25), values.quantile(0.75)
    return values > q3 + 3 * (q3 - q1)


def capped_scale(values: pd.Series) -> alt.Scale:
    """A y scale up to the largest non-outlier, so one slow request cannot flatten the rest."""
    kept = values[~outliers(values)]
    top = float(kept.max()) if len(kept) else float(values.max())
    return alt.Scale(domain=[0, top * 1.1 or 1], clamp=True)


def over_time(frame: pd.DataFrame, y: str, color: str, title: str, scale: alt.Scale) -> alt.Chart:
    chart: alt.Chart = (
        alt.Chart(frame, title=title)
        .mark_line(point=True)
        .encode(
            x=alt.X("time:T", axis=TIME),
            y=alt.Y(f"{y}:Q", scale=scale, title="ms"),
            color=f"{color}:N",
        )
    )
    return chart


def marked_outliers(frame: pd.DataFrame, y: str, scale: alt.Scale) -> alt.Chart:
    """Outliers drawn at the top edge (clamped) as red triangles, with their value on hover."""
    tooltip = [
        alt.Tooltip("created_at:T", format="%Y-%m-%d %H:%M:%S"),
        alt.Tooltip(f"{y}:Q", format=",.1f"),
        "mode:N",
    ]
    chart: alt.Chart = (
        alt.Chart(frame[frame["outlier"]])
        .mark_point(shape="triangle-up", color="red", size=80, filled=True)
        .encode(x=alt.X("created_at:T", axis=TIME), y=alt.Y(f"{y}:Q", scale=scale), tooltip=tooltip)
    )
    return chart
