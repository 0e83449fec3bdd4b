"""The extender service: the decisions behind each kube-scheduler verb.

This is the seam between the front doors and the core.  The HTTP app
(:mod:`extender.http`) turns wire JSON into calls here; the cluster comes
from a :class:`ClusterSource` (the Kubernetes adapter's informers, or a fixed
state read from manifests); binding goes through an optional
:class:`Binder`.  Every decision is written to a :class:`DecisionLog`, and
the jobs Muster governs that cannot be placed (rejected for quota or
reservation reasons, or proposed for kube-scheduler's own preemption) are
handed on through ``on_unschedulable`` (the PostFilter loop's trigger).

The verbs trust only what kube-scheduler would send, since anyone who reaches the port
can call them: ``filter`` answers for any pod, but keeps nothing for a pod the informer
does not know as pending (:meth:`Extender.filter`), and ``bind`` binds only a pod the
informer knows as pending, to a node Muster's own decisions allow (:func:`bind_refusal`).

Two modules: :mod:`~extender.service.verbs` (the :class:`Extender`) and
:mod:`~extender.service.sources` (the protocols the front doors implement, and
:class:`StaticSource`); import either from here.
"""

from extender.service.sources import (
    Binder,
    BindError,
    ClusterSource,
    RoomKeeper,
    StateBusy,
    StaticSource,
    holding,
)
from extender.service.verbs import (
    BIND_WAIT_SECONDS,
    BIND_WAITERS,
    NO_BINDER_ERROR,
    NOT_KNOWN_NOTE,
    BindResult,
    Extender,
)

__all__ = [
    "BIND_WAITERS",
    "BIND_WAIT_SECONDS",
    "NOT_KNOWN_NOTE",
    "NO_BINDER_ERROR",
    "BindError",
    "BindResult",
    "Binder",
    "ClusterSource",
    "Extender",
    "RoomKeeper",
    "StateBusy",
    "StaticSource",
    "holding",
]
