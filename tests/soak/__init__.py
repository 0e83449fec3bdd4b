"""The randomized soak test (issue #14, item 7): a seeded stream of jobs and faults on
the real control plane, with Muster's invariants checked from the API all along.

``plan`` draws the stream from a seed, ``invariants`` checks what the API shows, ``run``
plays a plan on the control plane; ``python -m tests.soak`` (``make soak``) runs it and
``test_soak.py`` runs a three-minute slice of it in ``make test``.
"""
