"""Benchmarks that print figures: placement throughput, latency and quality."""
