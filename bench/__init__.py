"""Muster's benchmarks; ``python -m bench`` runs them all (see docs/benchmarks.md)."""
