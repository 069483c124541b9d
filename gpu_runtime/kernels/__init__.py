"""Fused GPU kernels (Triton); each also runs under Triton's interpreter on CPU tensors."""

# The layout of the tables the injection kernel reads (``inject``), which ``connector/plan.py``
# writes: here, torch-free, so that both sides share one definition.
TOKEN_FIELDS = 4  # per loaded token: fact row, token within the fact, position change, slot
FACT_FIELDS = 3  # per fact: arena (0 GPU, 1 host), stored tokens, first row in the slab table
