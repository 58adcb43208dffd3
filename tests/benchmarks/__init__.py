"""Tests of the scripts under benchmarks/ that keep BENCHMARKS.md in step with benchmarks/results/."""
