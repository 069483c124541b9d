"""InferScale backend: the tenant REST API, its Postgres schema and services."""
