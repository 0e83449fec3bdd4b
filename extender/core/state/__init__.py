"""The cluster as the core sees it: :class:`ClusterState` and the small indexes behind it.

``cluster`` is the façade decisions read (with its mixins ``room``, the room held for
jobs, and ``jobview``, what it knows per job); ``nodes`` (node usage and the free-room
formula), ``victims`` (victim units in the victim order) and ``book`` (reservations
and admission holds) are its indexes; quota usage is :mod:`quota.accounting`'s ledger.
``overlay`` is the one way to ask "what if these pods were gone?" without changing it.
"""

from extender.core.state.book import GangBackoff, Reservation
from extender.core.state.cluster import ClusterState, node_domains
from extender.core.state.nodes import Copies, CopiesKey, memoise_on_node
from extender.core.state.overlay import Overlay
from extender.core.state.victims import SCATTERED, UnitEntry, UnitPlace

__all__ = [
    "SCATTERED",
    "ClusterState",
    "Copies",
    "CopiesKey",
    "GangBackoff",
    "Overlay",
    "Reservation",
    "UnitEntry",
    "UnitPlace",
    "memoise_on_node",
    "node_domains",
]
