"""Benchmarks: `python -m bench quick | full | <scenario> [...]`. Never part of `make test`."""
