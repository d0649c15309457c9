"""Benchmark harness: `make bench` runs every registered benchmark and records the results."""
