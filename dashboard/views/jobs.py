"""Ingestion and encoding jobs: progress, failures with their errors, and the re-encode action."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard.client import AdminClient


def render(client: AdminClient) -> None:
    st.header("Jobs")
    if st.button(
        "Re-encode now", help="Encode facts without a ready encoding, or whose KV was lost"
    ):
        client.reencode()
        st.success("Queued: the worker re-encodes what needs it; its job shows up here.")
    rows = client.jobs()
    if not rows:
        st.info("No jobs yet: importing a conversation or adding memories creates them.")
        return
    frame = pd.DataFrame(rows)
    frame["progress"] = frame["progress_done"] / frame["progress_total"].where(
        frame["progress_total"] > 0, 1
    )
    frame["created_at"] = pd.to_datetime(frame["created_at"]).dt.strftime("%Y-%m-%d %H:%M:%S")
    counts = frame["status"].value_counts()
    cols = st.columns(4)
    for cell, state in zip(cols, ("queued", "running", "succeeded", "failed"), strict=True):
        cell.metric(state, int(counts.get(state, 0)))
    shown = ["created_at", "tenant", "kind", "status", "progress", "progress_done",
             "progress_total", "attempts", "dispatched"]  # fmt: skip
    st.dataframe(frame[shown], hide_index=True, column_config={
        "progress": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0)})  # fmt: skip
    failed = frame[frame["status"] == "failed"]
    if len(failed):
        st.subheader("Failures")
        st.dataframe(failed[["created_at", "tenant", "kind", "attempts", "error"]], hide_index=True)
