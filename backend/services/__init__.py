"""Use cases: each service works inside one database transaction owned by its caller."""
