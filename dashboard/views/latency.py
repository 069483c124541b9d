"""Chat latency from the API's request log: TTFT over time per mode (p50, p95), TTFT against k
with a trend line, requests/s, injected vs prefilled tokens. Cold-start outliers are marked and
do not set the scale. Then fairness per tenant: 429s, tokens served and time queued for the
engine, side by side."""

from __future__ import annotations

import altair as alt
import httpx
import pandas as pd
import streamlit as st

from dashboard.charts import TIME, capped_scale, marked_outliers, outliers, over_time
from dashboard.client import AdminClient

MS = st.column_config.NumberColumn(format="%.1f ms")


def _per_minute(frame: pd.DataFrame) -> pd.DataFrame:
    grouped = frame.set_index("created_at").groupby("mode").resample("1min")["ttft_ms"]
    stats = grouped.agg(["median", lambda s: s.quantile(0.95), "count"]).reset_index()
    stats.columns = ["mode", "time", "p50", "p95", "requests"]
    return stats.dropna()


def _fairness(client: AdminClient) -> None:
    st.subheader("Fairness per tenant")
    rows = client.fairness()
    if not rows:
        return
    table = pd.DataFrame([{
        "tenant": r["name"], "requests this window": r["requests_this_window"],
        "in flight": r["in_flight"], "429s": r["limited_total"],
        "tokens served": (r["gate"] or {}).get("prefill_tokens", 0)
        + (r["gate"] or {}).get("decode_tokens", 0),
        "waiting now": (r["gate"] or {}).get("waiting", 0),
        "queued admissions": (r["gate"] or {}).get("queued", 0),
        "queue wait s": (r["gate"] or {}).get("queue_wait_s", 0.0),
    } for r in rows])  # fmt: skip
    st.dataframe(table, hide_index=True)
    if not any(r["gate"] for r in rows):
        st.caption("The runtime did not answer: its fair gate's counts are missing.")
    long = table.melt("tenant", ["tokens served", "429s", "queue wait s"], "measure", "value")
    st.altair_chart(alt.Chart(long).mark_bar().encode(
        x=alt.X("value:Q", title=None), y=alt.Y("tenant:N", title=None), color="tenant:N",
        row=alt.Row("measure:N", title=None)).resolve_scale(x="independent"),
        use_container_width=True)  # fmt: skip
    _limits_form(client, {r["name"]: r["tenant_id"] for r in rows})


LIMIT_FIELDS = {
    "requests_per_minute": "requests per minute",
    "tokens_per_minute": "tokens per minute",
    "max_concurrent_requests": "requests in flight",
}


def _limits_form(client: AdminClient, tenants: dict[str, str]) -> None:
    """A tenant's limits and weight: blank keeps the platform's default, 0 means no limit."""
    name = st.selectbox("limits of", list(tenants), key="limits_tenant")
    if name is None:
        return
    current = client.limits(tenants[name])
    with st.form("limits"):
        st.caption("Blank: the platform's default (shown); 0: no limit.")
        given: dict[str, str] = {}
        for field, label in LIMIT_FIELDS.items():
            own = current["overrides"][field]
            given[field] = st.text_input(
                f"{label} (default {current['effective'][field] if own is None else '-'})",
                "" if own is None else str(own),
            )
        weight = current["overrides"]["fair_weight"]
        given["fair_weight"] = st.text_input(
            "share of the engine under contention (weight; default 1)",
            "" if weight is None else str(weight),
        )
        if st.form_submit_button("Save limits"):
            try:
                body: dict[str, float | None] = {
                    k: (float(v) if k == "fair_weight" else int(v)) if v.strip() else None
                    for k, v in given.items()
                }
            except ValueError:
                st.error("Limits are whole numbers, the weight a positive number.")
                return
            try:
                client.set_limits(tenants[name], body)
            except httpx.HTTPStatusError as exc:
                st.error(f"Refused: {exc.response.json().get('error', {}).get('message')}")
                return
            st.success(f"Saved: {name}'s limits hold from its next request.")


def render(client: AdminClient) -> None:
    st.header("Chat latency")
    tenants = {t["name"]: t["tenant_id"] for t in client.tenants()}
    choice = st.selectbox("tenant", ["all tenants", *tenants])
    rows = client.requests(tenants.get(choice))
    if not rows:
        st.info("No chat requests yet.")
        return
    _render_latency(rows)
    _fairness(client)
    _in_flight(client)


def _in_flight(client: AdminClient) -> None:
    """Where requests are now, per process and stage: a stage that keeps requests, or an old
    one there, is where they wait (a stuck one is in the process's log with its stack)."""
    st.subheader("Requests in flight by stage")
    body = client.in_flight()
    rows = [{"process": "API", "stage": stage, "requests": n, "oldest s": None}
            for stage, n in body["api"]["in_flight"].items()]  # fmt: skip
    for runtime in body["runtimes"]:
        rows += [{"process": f"runtime {runtime['replica']}", "stage": stage,
                  "requests": entry["count"], "oldest s": entry["oldest_s"]}
                 for stage, entry in runtime["in_flight"].items()]  # fmt: skip
    table = pd.DataFrame(rows, columns=["process", "stage", "requests", "oldest s"])
    st.altair_chart(alt.Chart(table).mark_bar().encode(
        x=alt.X("requests:Q", title="requests in flight"), y=alt.Y("stage:N", title=None),
        color="process:N"), use_container_width=True)  # fmt: skip
    st.dataframe(table, hide_index=True)
    stuck = body["api"]["stuck_total"]
    if stuck:
        named = ", ".join(f"{n:.0f} in {stage}" for stage, n in sorted(stuck.items()))
        st.warning(f"Requests the API reported stuck since its processes started: {named} "
                   "(its log has where each waited).")  # fmt: skip


def _render_latency(rows: list[dict[str, object]]) -> None:
    frame = pd.DataFrame(rows)
    frame["created_at"] = pd.to_datetime(frame["created_at"], utc=True).dt.tz_localize(None)
    frame["outlier"] = frame.groupby("mode")["ttft_ms"].transform(outliers).astype(bool)
    frame["prefilled_tokens"] = frame["prompt_tokens"] - frame["injected_tokens"]

    summary = frame.groupby("mode")["ttft_ms"].describe(percentiles=[0.5, 0.95])
    summary = summary.rename(columns={"50%": "p50", "95%": "p95"})[["count", "p50", "p95", "max"]]
    st.subheader("TTFT by memory mode")
    st.dataframe(summary.reset_index(), hide_index=True,
                 column_config={"p50": MS, "p95": MS, "max": MS})  # fmt: skip
    marked = int(frame["outlier"].sum())
    if marked:
        st.caption(f"{marked} outlier(s) (e.g. a cold start) marked ▲ at the top edge.")

    scale = capped_scale(frame["ttft_ms"])
    minutes = _per_minute(frame)
    p50 = over_time(minutes, "p50", "mode", "TTFT p50 per minute", scale)
    p95 = over_time(minutes, "p95", "mode", "TTFT p95 per minute", scale)
    st.altair_chart(p50 + marked_outliers(frame, "ttft_ms", scale), use_container_width=True)
    st.altair_chart(p95, use_container_width=True)

    st.subheader("TTFT against the number of memories k")
    points = alt.Chart(frame[~frame["outlier"]]).mark_circle(opacity=0.5).encode(
        x=alt.X("k:Q"), y=alt.Y("ttft_ms:Q", title="TTFT ms"), color="mode:N")  # fmt: skip
    trend = points.transform_regression("k", "ttft_ms", groupby=["mode"]).mark_line()
    st.altair_chart(points + trend, use_container_width=True)

    st.subheader("Requests per second")
    rate = minutes.assign(per_s=minutes["requests"] / 60.0)
    st.altair_chart(alt.Chart(rate).mark_bar().encode(
        x=alt.X("time:T", axis=TIME), y=alt.Y("per_s:Q", title="req/s"), color="mode:N"),
        use_container_width=True)  # fmt: skip

    st.subheader("Prompt tokens: injected as KV vs prefilled")
    tokens = frame.groupby("mode")[["injected_tokens", "prefilled_tokens"]].sum().reset_index()
    st.altair_chart(alt.Chart(tokens.melt("mode", var_name="kind", value_name="tokens"))
                    .mark_bar().encode(x="mode:N", y="tokens:Q", color="kind:N"),
                    use_container_width=True)  # fmt: skip
