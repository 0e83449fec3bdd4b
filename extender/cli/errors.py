"""The command line's one error for bad input: :class:`InputError`.

Every file a ``muster`` command reads (manifests, Muster's arguments, a
KubeSchedulerConfiguration) and every option it parses reports a problem as an
``InputError`` whose message is one line naming where and what; the commands print it
and exit with status 2.
"""

from __future__ import annotations


class InputError(ValueError):
    """Invalid input; the message is one line naming where and what."""
