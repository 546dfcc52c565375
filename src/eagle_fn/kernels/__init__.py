"""Fused Triton kernels with the torch functions' signatures."""
