"""Benchmarks and their scoring, shared by RL rewards and evaluation."""
