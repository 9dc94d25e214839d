"""Benchmarks: programs that compare alternatives in the same run and report ratios."""
