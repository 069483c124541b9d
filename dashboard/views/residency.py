"""Cache residency from the runtime's live pool statistics: where each tenant's KV is, how often
each tier served it, what fell back to prefill, evictions and load latency."""

from __future__ import annotations

import time
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from dashboard.charts import TIME
from dashboard.client import AdminClient

TIERS = ("gpu", "host", "disk")
SAMPLES = "residency_samples"  # session state: counters over time, for the hit-rate chart


def _record(scope: str, totals: dict[str, int]) -> pd.DataFrame:
    samples = st.session_state.setdefault(SAMPLES, {}).setdefault(scope, [])
    sample = {"time": pd.Timestamp(time.time(), unit="s")}
    sample |= {f"{t}_hits": totals.get(f"{t}_hits", 0) for t in TIERS}
    sample["misses"] = totals.get("misses", 0)
    samples.append(sample)
    del samples[:-360]
    frame = pd.DataFrame(samples)
    counts = frame[[f"{t}_hits" for t in TIERS] + ["misses"]]
    # Per interval between refreshes once there are two samples; until then, since start.
    window = counts.diff().fillna(counts) if len(frame) > 1 else counts
    lookups = window.sum(axis=1).replace(0, 1)
    for tier in TIERS:
        frame[tier] = window[f"{tier}_hits"] / lookups
    frame["prefill"] = window["misses"] / lookups
    return frame.iloc[1:] if len(frame) > 1 else frame


def _ranks(workers: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per worker rank of every replica (ranks in the order each replica reports)."""
    seen: dict[str, int] = {}
    rows = []
    for worker in workers:
        replica = str(worker.get("replica", ""))
        rank = seen[replica] = seen.get(replica, -1) + 1
        row: dict[str, Any] = {"replica": replica, "rank": rank}
        for tier in TIERS:
            row[f"{tier} facts"] = int(worker.get(f"{tier}_entries", 0))
            row[f"{tier} MiB"] = round(int(worker.get(f"{tier}_bytes", 0)) / 2**20, 2)
        row["hits"] = sum(int(worker.get(f"{t}_hits", 0)) for t in TIERS)
        row["misses"] = int(worker.get("misses", 0))
        row["evictions"] = int(worker.get("evictions", 0))
        rows.append(row)
    return pd.DataFrame(rows)


def render(client: AdminClient) -> None:
    st.header("Cache residency")
    tenants = {t["name"]: t["tenant_id"] for t in client.tenants()}
    choice = st.selectbox("tenant", ["all tenants", *tenants])
    tenant_id = tenants.get(choice)
    residency = client.residency(tenant_id)
    workers, totals = residency["workers"], residency["totals"]
    if not workers:
        st.info("The runtime reports no worker statistics yet.")
        return
    cols = st.columns(5)
    for cell, tier in zip(cols, TIERS, strict=False):
        mib = totals.get(f"{tier}_bytes", 0) / 2**20
        entries = totals.get(f"{tier}_entries", 0)
        cell.metric(f"facts on {tier}", entries, f"{mib:.2f} MiB", delta_color="off")
    cols[3].metric("misses → prefill", totals.get("misses", 0))
    cols[4].metric("evictions", totals.get("evictions", 0))
    st.subheader("Per worker rank")
    st.caption(
        "The totals above add up the ranks (the admin API sums them). Under tensor parallelism "
        "each rank holds its KV heads' slice of every fact: a fact counts once per rank, and its "
        "bytes add up to it."
    )
    st.dataframe(_ranks(workers), hide_index=True)
    placed = pd.DataFrame([{"tier": t, "MiB": totals.get(f"{t}_bytes", 0) / 2**20} for t in TIERS])
    st.subheader("Bytes per tier")
    st.bar_chart(placed.set_index("tier"))
    st.subheader("Hit rate per tier over time")
    st.caption("Share of the lookups between two refreshes; prefill: misses, recomputed")
    rates = _record(tenant_id or "all", totals)
    history = rates.melt("time", [*TIERS, "prefill"], "tier", "share")
    st.altair_chart(alt.Chart(history).mark_line(point=True).encode(
        x=alt.X("time:T", axis=TIME), y=alt.Y("share:Q", axis=alt.Axis(format="%")),
        color="tier:N"), use_container_width=True)  # fmt: skip
    st.subheader("Load latency per tier")
    rows = []
    for worker in workers:
        latency = worker.get("load_latency") or {}
        bounds = [f"≤{b * 1000:g} ms" for b in latency.get("bounds_s", [])] + ["more"]
        for tier in TIERS:
            for bucket, count in zip(
                bounds, latency.get(tier, {}).get("buckets", []), strict=False
            ):
                rows.append({"tier": tier, "bucket": bucket, "loads": count})
    if rows:
        histogram = pd.DataFrame(rows).groupby(["tier", "bucket"], sort=False).sum().reset_index()
        st.altair_chart(alt.Chart(histogram).mark_bar().encode(
            x=alt.X("bucket:N", sort=None, title=None), y="loads:Q", color="tier:N",
            xOffset="tier:N"), use_container_width=True)  # fmt: skip
