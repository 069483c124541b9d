"""The ``inferscale`` command: the backend's processes (``backend.cli``) and the tools outside the
product packages: the platform demo (``inferscale.demo``), benchmarks (``bench``) and
evaluations (``evals``). Nothing in the product imports this package."""
