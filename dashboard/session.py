"""Who is looking: the operator's admin key for this browser session, checked against the API.

The key is entered on the login page and kept in this session only. Outside production a key in
``INFERSCALE_ADMIN_KEY`` logs in by itself (``make demo``); in production the operator always
types it, so reaching the port is not enough to see every tenant."""

from __future__ import annotations

import os

import httpx
import streamlit as st

from dashboard.client import AdminClient

KEY = "admin_key"


def auto_login_key() -> str | None:
    if os.environ.get("INFERSCALE_ENV", "dev") == "prod":
        return None
    return os.environ.get("INFERSCALE_ADMIN_KEY") or None


def check(key: str) -> str | None:
    """None if the API accepts ``key`` as the admin key, else what to tell the operator."""
    try:
        AdminClient(admin_key=key).status()
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code in (401, 403):
            return "The API refused this key: it is not the admin key."
        return f"The API answered {exc.response.status_code}: {exc.response.text[:200]}"
    except httpx.TransportError as exc:
        return f"The API at {AdminClient().base_url} is unreachable: {exc}"
    return None


def client() -> AdminClient:
    return AdminClient(admin_key=st.session_state.get(KEY, ""))


def logged_in() -> bool:
    if KEY not in st.session_state and (key := auto_login_key()) and check(key) is None:
        st.session_state[KEY] = key
    return KEY in st.session_state


def login_page() -> None:
    st.header("Operator login")
    with st.form("login"):
        key = st.text_input("Admin key", type="password")
        submitted = st.form_submit_button("Log in")
    if submitted:
        problem = check(key)
        if problem is None:
            st.session_state[KEY] = key
            st.rerun()
        st.error(problem)


def logout() -> None:
    st.session_state.pop(KEY, None)
    st.rerun()
