"""Operator dashboard: ``inferscale dashboard`` (Streamlit; reads only the admin API).

Pages: Overview, Cache residency, Latency, Memory browser, Jobs, behind a login with the admin
key. The monitoring pages refresh themselves (sidebar; the memory browser does not, it is edited
in); every page reports an unreachable API or a refused key instead of dying."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import streamlit as st

from dashboard import session
from dashboard.client import AdminClient
from dashboard.views import jobs, latency, memories, overview, residency

PAGES: list[tuple[Callable[[AdminClient], None], str, str, bool]] = [  # ..., auto-refresh
    (overview.render, "Overview", "overview", True),
    (residency.render, "Cache residency", "residency", True),
    (latency.render, "Latency", "latency", True),
    (memories.render, "Memory browser", "memories", False),
    (jobs.render, "Jobs", "jobs", True),
]


def guarded(render: Callable[[AdminClient], None], refresh: bool) -> Callable[[], None]:
    """The page behind the login (a deep link shows the login first, then the page), refreshed
    every few seconds if ``refresh``, with API failures shown as messages."""

    def page() -> None:
        if not session.logged_in():
            session.login_page()
            return
        every = st.session_state.get("refresh_s", 10) if refresh else 0

        @st.fragment(run_every=every or None)
        def body() -> None:
            try:
                render(session.client())
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code in (401, 403):
                    st.error("The API refused the admin key: log out and log in again.")
                else:
                    st.error(f"The API answered {exc.response.status_code}: "
                             f"{exc.response.text[:300]}")  # fmt: skip
            except httpx.TransportError as exc:
                st.error(f"The API at {session.client().base_url} is unreachable: {exc}")

        body()

    return page


def main() -> None:
    st.set_page_config(page_title="InferScale", layout="wide")
    st.title("InferScale")
    pages = [st.Page(guarded(render, refresh), title=title, url_path=path)
             for render, title, path, refresh in PAGES]  # fmt: skip

    def start() -> None:  # "/": the login, then the overview (which has its own URL)
        if session.logged_in():
            st.switch_page(pages[0])
        session.login_page()

    if session.logged_in():
        with st.sidebar:
            st.selectbox("auto-refresh", [10, 30, 0], key="refresh_s",
                         format_func=lambda s: f"every {s} s" if s else "off")  # fmt: skip
            if st.button("Log out"):
                session.logout()
    home = st.Page(start, title="Login", url_path="start", default=True, visibility="hidden")
    st.navigation([home, *pages], position="sidebar" if session.logged_in() else "hidden").run()


if __name__ == "__main__":
    main()
