"""Operator dashboard: ``streamlit run dashboard/streamlit_app.py`` (reads the admin API)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard.client import AdminClient


def overview(client: AdminClient) -> None:
    st.header("Tenants: memories and KV cache residency")
    rows = client.tenants()
    if not rows:
        st.info("No tenants yet: create one with POST /v1/tenants.")
        return
    frame = pd.DataFrame(rows)
    frame["kv_mib"] = frame["kv_bytes"] / 2**20
    cols = st.columns(4)
    cols[0].metric("tenants", len(frame))
    cols[1].metric("facts", int(frame["facts"].sum()))
    cols[2].metric("encoded", int(frame["encodings_ready"].sum()))
    cols[3].metric("KV stored (MiB)", f"{frame['kv_mib'].sum():.1f}")
    st.bar_chart(frame.set_index("name")[["encodings_ready", "encodings_waiting"]])
    st.bar_chart(frame.set_index("name")[["kv_mib"]])
    st.dataframe(frame.drop(columns=["kv_bytes"]), hide_index=True)


def latency(client: AdminClient) -> None:
    st.header("Chat latency")
    tenants = {t["name"]: t["tenant_id"] for t in client.tenants()}
    choice = st.selectbox("tenant", ["all", *tenants])
    rows = client.requests(None if choice == "all" else tenants[choice])
    if not rows:
        st.info("No chat requests yet.")
        return
    frame = pd.DataFrame(rows)
    frame["created_at"] = pd.to_datetime(frame["created_at"])
    by_mode = frame.groupby("mode")["ttft_ms"].describe(percentiles=[0.5, 0.95])
    st.subheader("TTFT by memory mode (ms)")
    st.dataframe(by_mode[["count", "50%", "95%", "max"]])
    st.subheader("TTFT vs number of memories k")
    st.scatter_chart(frame, x="k", y="ttft_ms", color="mode")
    st.subheader("TTFT over time")
    st.line_chart(frame.pivot_table(index="created_at", columns="mode", values="ttft_ms"))


def main() -> None:
    st.set_page_config(page_title="InferScale", layout="wide")
    st.title("InferScale")
    client = AdminClient()
    try:
        ready = client.ready()
    except Exception as exc:  # an operator page reports, it does not crash
        st.error(f"API unreachable at {client.base_url}: {exc}")
        return
    st.caption(f"API {client.base_url}: {ready.get('status')} {ready.get('checks')}")
    page = st.navigation(
        [
            st.Page(lambda: overview(client), title="Memories & cache", url_path="overview"),
            st.Page(lambda: latency(client), title="Latency", url_path="latency"),
        ]
    )
    page.run()


if __name__ == "__main__":
    main()
