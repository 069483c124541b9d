"""Memory browser: tenant → user → memories; search, history, edit, and delete with a
confirmation (the answer shows the KV purged from every tier and the disk)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from dashboard.client import AdminClient


def _name(user: dict[str, Any]) -> str:
    # Memories added through Mem0's API with only an agent, app or run id have a reserved
    # owner whose id is a control character: name what it is instead of printing it.
    return "(no user id: agent, app or run memories)" if user.get("scoped") else user["user_id"]


def render(client: AdminClient) -> None:
    st.header("Memory browser")
    tenants = {t["name"]: t["tenant_id"] for t in client.tenants()}
    if not tenants:
        st.info("No tenants yet.")
        return
    tenant_id = tenants[st.selectbox("tenant", list(tenants))]
    users = client.users(tenant_id)
    if not users:
        st.info("This tenant has no users yet.")
        return
    labels = {f"{_name(u)} ({u['memories']} memories)": u["user_id"] for u in users}
    user_id = labels[st.selectbox("user", list(labels))]
    query = st.text_input("search this user's memories", key="memory_query")
    rows = client.memories(tenant_id, user_id, query or None)
    if not rows:
        st.info("No memories match." if query else "This user has no memories.")
        return
    frame = pd.DataFrame(rows)
    shown = [c for c in ("id", "memory", "version", "score", "updated_at") if c in frame]
    st.dataframe(frame[shown], hide_index=True, use_container_width=True)

    texts = {f"{r['memory'][:80]} · {r['id'][:8]}": r for r in rows}
    chosen = texts[st.selectbox("memory", list(texts))]
    st.subheader("History")
    st.dataframe(pd.DataFrame(client.history(tenant_id, chosen["id"])), hide_index=True)
    with st.form("edit"):
        text = st.text_area("text", chosen["memory"])
        if st.form_submit_button("Save") and text.strip() != chosen["memory"]:
            updated = client.update(tenant_id, chosen["id"], text.strip())
            st.success(f"Saved as version {updated['version']}; its KV is re-encoded.")
    confirm = st.checkbox("I want to delete this memory everywhere", key=f"confirm-{chosen['id']}")
    if st.button("Delete memory", disabled=not confirm, type="primary"):
        result = client.delete(tenant_id, chosen["id"])
        where = result["kv_tier_after"] or "no tier"
        file = "a file" if result["kv_file_after"] else "no file"
        st.success(f"Deleted. Its KV is now on {where} and in {file}: purged everywhere.")
