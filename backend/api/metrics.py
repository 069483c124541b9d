"""Prometheus metrics of the API process."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

HTTP_REQUESTS = Counter(
    "inferscale_http_requests_total", "HTTP requests", ["method", "route", "status"]
)
CHAT_TTFT = Histogram(
    "inferscale_chat_ttft_seconds",
    "Time to first token of chat completions",
    ["mode"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
CHAT_MEMORIES = Histogram(
    "inferscale_chat_memories", "Memories used per chat", buckets=(0, 1, 5, 10, 20, 50, 100, 200)
)
TENANT_REQUESTS = Counter(
    "inferscale_tenant_requests_total",
    "Tenants' requests by outcome at their limits (admitted, limited: a 429)",
    ["tenant", "outcome"],
)
TENANT_TOKENS = Counter(
    "inferscale_tenant_tokens_total", "Tokens served to each tenant's chats", ["tenant", "kind"]
)
