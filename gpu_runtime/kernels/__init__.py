"""Fused GPU kernels (Triton); each also runs under Triton's interpreter on CPU tensors."""
