"""The peers Muster is measured against, as the local control plane runs them (issue 25).

A peer is another scheduler run in kube-scheduler's place (``ControlPlane(scheduler_binary=
...)``), built from its published Go module by ``hack/build-peers.sh``
(:func:`~localcluster.binaries.ensure_peer`), with its own documented configuration.
"""

from __future__ import annotations

from .common import Json

#: scheduler-plugins v0.34.7 is built against Kubernetes 1.34: run it beside the 1.35
#: control plane (a kube-scheduler may be one minor release older than kube-apiserver).
SCHEDULER_PLUGINS_KUBERNETES = "1.35"


def scheduler_plugins_config() -> Json:
    """scheduler-plugins' documented configuration for CapacityScheduling with
    Coscheduling (its Helm chart ``as-a-second-scheduler``, values.yaml, v0.34.7): one
    profile, both plugins at every extension point they implement, PrioritySort off
    (Coscheduling sorts the queue), and Coscheduling's Permit wait of 10 s.  The top-level
    fields of a KubeSchedulerConfiguration, for ``ControlPlane(scheduler_config=...)``."""
    return {
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "plugins": {
                    "multiPoint": {
                        "enabled": [{"name": "Coscheduling"}, {"name": "CapacityScheduling"}],
                        "disabled": [{"name": "PrioritySort"}],
                    }
                },
                "pluginConfig": [
                    {"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": 10}}
                ],
            }
        ]
    }


def scheduler_plugins_rbac() -> list[Json]:
    """What scheduler-plugins' scheduler reads and writes beyond kube-scheduler's own
    rights (its chart's rbac.yaml, the scheduling.x-k8s.io rule), granted to the
    scheduler's user."""
    return scheduler_user_role(
        "scheduler-plugins-peer",
        [
            {
                "apiGroups": ["scheduling.x-k8s.io"],
                "resources": [
                    "podgroups",
                    "elasticquotas",
                    "podgroups/status",
                    "elasticquotas/status",
                ],
                "verbs": ["get", "list", "watch", "create", "delete", "update", "patch"],
            }
        ],
    )


def scheduler_user_role(name: str, rules: list[Json]) -> list[Json]:
    """A ClusterRole ``name`` with ``rules``, bound to the user every scheduler the
    control plane runs signs in as (``system:kube-scheduler``): a peer's rights beyond
    kube-scheduler's own, for ``ControlPlane(scheduler_rbac=...)``."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": "system:kube-scheduler",
                }
            ],
        },
    ]
