"""The cluster as the core sees it: :class:`ClusterState` and the small parts it is made of.

``cluster`` is the state decisions read and the one path that feeds its parts; its
mixins: ``room`` its room operations (reservations, vacancies, admission holds),
``devices`` DRA's devices, ``podview`` and ``nodeview`` what decisions read of a pod or
job and of a node.  The parts, each with its own fields: ``directory`` (the pods, per
job, marks, nominations), ``declarations`` (pod groups, controller sizes, topologies),
``membership`` (each pod's quota), ``minresources`` (PodGroup ``minResources`` holds),
``nodes`` (node usage and the free-room formula), ``victims`` (victim units in the
victim order) and ``book`` (reservations and admission holds); quota usage is
:mod:`quota.accounting`'s ledger.
``overlay`` is the one way to ask "what if these pods were gone?" without changing it.
"""

from extender.core.state.book import GangBackoff, Reservation, TakenBack
from extender.core.state.cluster import ClusterState
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
    "TakenBack",
    "UnitEntry",
    "UnitPlace",
    "memoise_on_node",
]
