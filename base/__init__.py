"""Muster's foundation: quantities and resource lists, the keys it reads and writes, and
the error that names a field.

The bottom layer: it imports nothing from the rest of Muster.  ``quota`` (quota
accounting) builds on it, the decision core (``extender.core``) on both, and the front
doors (``extender.http``, ``extender.kube``, ``extender.cli``) on the core; the layer
contract in pyproject.toml (import-linter) keeps the arrows pointing that way.
"""
