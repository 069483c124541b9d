"""Operator dashboard. Run with ``streamlit run dashboard/streamlit_app.py``."""

from __future__ import annotations

import streamlit as st
from sqlalchemy import text

from backend.db.session import get_engine


def main() -> None:
    st.set_page_config(page_title="InferScale", layout="wide")
    st.title("InferScale")
    st.caption("Memories, cache residency and latency per tenant.")
    try:
        with get_engine().connect() as conn:
            revision = conn.execute(text("select version_num from alembic_version")).scalar_one()
        st.success(f"database reachable, schema revision {revision}")
    except Exception as exc:  # an operator page reports, it does not crash
        st.error(f"database unreachable: {exc}")


if __name__ == "__main__":
    main()
