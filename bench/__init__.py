"""Benchmarks and tuning sweeps of the kernel on a CUDA device."""
