"""Overview: the platform's health, the runtime replicas (health, tenants served, pools), and
every tenant's memories with the replica that serves it."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from dashboard.client import AdminClient

MIB = 2**20


def _health(status: dict[str, Any]) -> None:
    runtime = status["runtime"]
    state = runtime["status"]
    if state == "ok" and runtime.get("replicas_up", 1) < runtime.get("replicas", 1):
        state = f"{runtime['replicas_up']} of {runtime['replicas']} replicas up"
    cells = st.columns(4)
    for cell, (name, value) in zip(cells, [
        ("database", status["database"]), ("broker", status["broker"]),
        ("workers", f"{len(status['workers'])} answering" if status["workers"] else "none"),
        ("runtime", state),
    ], strict=True):  # fmt: skip
        ok = value == "ok" or (name == "workers" and status["workers"])
        delta = "up" if ok else ("degraded" if "replicas up" in value else "down")
        cell.metric(name, value, delta=delta, delta_color="normal" if ok else "inverse")


def _replicas(status: dict[str, Any], tenants: list[dict[str, Any]]) -> None:
    """One row per runtime replica: its health as the API sees it and the tenants it serves."""
    replicas = status.get("replicas", [])
    served = pd.Series([t.get("replica") for t in tenants], dtype=object).value_counts()
    rows = [{"replica": r["url"], "status": r["status"], "since": r["since"],
             "tenants": int(served.get(r["url"], 0)), "model": r.get("model", ""),
             "injection": r.get("injection", ""), "error": r["error"]}
            for r in replicas]  # fmt: skip
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    for replica in replicas:  # the fidelity canary failed there: kv is served as prompt mode
        fidelity = replica.get("fidelity") or {}
        if fidelity.get("injection") == "off":
            st.error(
                f"Injection is off on {replica['url']}: {fidelity.get('reason')}. Its kv and "
                "hybrid chats are prefilled as prompt mode (slower; the answers are exact)."
            )


def _pools(status: dict[str, Any]) -> None:
    runtime = status["runtime"]
    if runtime["status"] != "ok":
        st.warning(f"The runtime is {runtime['status']}: no model or pool figures.")
        return
    st.caption(f"model {runtime['model']} · {runtime['dtype']} · context "
               f"{runtime['max_model_len']} tokens · block {runtime['block_size']}")  # fmt: skip
    rows = []
    for replica in (r for r in status["replicas"] if r["status"] == "ok"):
        for rank, pool in enumerate(replica["pools"]):
            for tier in ("gpu", "host"):
                capacity = pool.get(f"{tier}_capacity_bytes", 0)
                used = capacity - pool.get(f"{tier}_free_bytes", capacity)
                fill = used / capacity if capacity else 0.0
                rows.append({"replica": replica["url"], "rank": rank, "tier": tier,
                             "budget MiB": capacity / MIB, "used MiB": used / MIB,
                             "fill": fill})  # fmt: skip
    st.dataframe(pd.DataFrame(rows), hide_index=True, column_config={
        "budget MiB": st.column_config.NumberColumn(format="%.1f"),
        "used MiB": st.column_config.NumberColumn(format="%.1f"),
        "fill": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="percent"),
    })  # fmt: skip


def render(client: AdminClient) -> None:
    st.header("Overview")
    status = client.status()
    rows = client.tenants()
    _health(status)
    st.subheader("Runtime replicas")
    _replicas(status, rows)
    st.subheader("KV pools")
    _pools(status)
    st.subheader("Tenants")
    if not rows:
        st.info("No tenants yet: create one with POST /v1/tenants.")
        return
    frame = pd.DataFrame(rows)
    frame["kv_mib"] = frame["kv_bytes"] / MIB
    cols = st.columns(4)
    cols[0].metric("tenants", len(frame))
    cols[1].metric("live facts", int(frame["facts"].sum()))
    cols[2].metric("encodings ready", int(frame["encodings_ready"].sum()))
    cols[3].metric("KV stored", f"{frame['kv_mib'].sum():.1f} MiB")
    states = {"encodings_ready": "ready", "encodings_waiting": "pending",
              "encodings_failed": "failed"}  # fmt: skip
    st.bar_chart(frame.set_index("name")[list(states)].rename(columns=states))
    st.dataframe(frame.drop(columns=["kv_bytes"]), hide_index=True, column_config={
        "kv_mib": st.column_config.NumberColumn("KV MiB", format="%.2f")})  # fmt: skip
