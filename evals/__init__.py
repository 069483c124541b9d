"""Quality evaluations: ``inferscale eval locomo`` (LoCoMo QA F1, kv vs prompt, with fidelity)."""
