"""Benchmarks against named baselines: ``python -m svmuon.bench NAME [options]`` writes a JSON result."""
