"""The label, annotation and condition keys Muster reads and writes.

Compatible with Koordinator and scheduler-plugins; docs/configuration.md's "Labels and
annotations" table is the reference.  Every other module names
these constants instead of spelling the strings.
"""

from __future__ import annotations

# Which job (gang) a pod belongs to, in order of precedence.
POD_GROUP_LABEL = "pod-group.scheduling.sigs.k8s.io"
POD_GROUP_NAME_LABEL = "pod-group.scheduling.sigs.k8s.io/name"
POD_GROUP_X_K8S_LABEL = "scheduling.x-k8s.io/pod-group"
GANG_NAME_ANNOTATION = "gang.scheduling.koordinator.sh/name"
GANG_MIN_AVAILABLE_ANNOTATION = "gang.scheduling.koordinator.sh/min-available"
#: Volcano's pod-group annotations (Kubeflow Trainer, training-operator, LeaderWorkerSet,
#: KubeRay and the Spark operator write them).
VOLCANO_GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
#: Kueue's plain-pod groups: the group's name (label) and its size (annotation).
KUEUE_POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
#: Kueue's Topology Aware Scheduling keys on a pod template: the node label every pod of
#: the gang must share (required), or should (preferred).
KUEUE_REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
#: Kueue's podset slices: every ``podset-slice-size`` pods of the gang in one domain of the
#: ``podset-slice-required-topology`` level (the two go together).
KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"
#: ``"true"`` on the pods of a controller (a Job's pod template): with no pod-group name,
#: the controller's pods form one gang named after it, placed all or nothing.
ALL_OR_NOTHING_LABEL = "muster.dev/all-or-nothing"

# Quota membership and the pod's role in preemption.
QUOTA_NAME_LABEL = "quota.scheduling.koordinator.sh/name"
QUOTA_PARENT_LABEL = "quota.scheduling.koordinator.sh/parent"
QUOTA_IS_PARENT_LABEL = "quota.scheduling.koordinator.sh/is-parent"
#: On an ElasticQuota: the further namespaces it admits (JSON list), as Koordinator's.
QUOTA_NAMESPACES_ANNOTATION = "quota.scheduling.koordinator.sh/namespaces"
PREEMPTIBLE_LABEL = "quota.scheduling.koordinator.sh/preemptible"
CAN_PREEMPT_LABEL = "quota.scheduling.koordinator.sh/can-preempt"

# Written by Muster on victims (label and annotation).
SOFT_EVICTION_KEY = "scheduling.koordinator.sh/soft-eviction"

# The DisruptionTarget condition's reason on a preempted pod, written by kube-scheduler's
# own preemption and by Muster's marks; its message starts with "<component>: ".
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
# The reason of the DisruptionTarget=False Muster writes as it takes a mark back.
PREEMPTION_ABANDONED = "PreemptionAbandoned"
# Muster's name as a component: in that message, in Events' source, in marks' initiator.
MUSTER_COMPONENT = "muster"
#: A pod condition Muster writes (pod status: tenants cannot) on a pod admitted
#: preemptible whose label later says otherwise: it stays preemptible, for every replica
#: and after a restart.
ADMITTED_PREEMPTIBLE_CONDITION = "muster.dev/AdmittedPreemptible"

# Written by Muster on a preemptor's pods: the node held for it (JSON).
RESERVATION_ANNOTATION = "muster.dev/reservation"
#: On a gang's pending pods: the gang was given up after its timeout and backs off.
GANG_BACKOFF_ANNOTATION = "muster.dev/gang-backoff"
#: Patched on parked pods to make kube-scheduler retry them (any update requeues a pod).
REQUEUE_ANNOTATION = "muster.dev/requeue"

# Kueue-style policies, as annotations on an ElasticQuota.
WITHIN_QUOTA_ANNOTATION = "muster.dev/within-quota"
RECLAIM_WITHIN_COHORT_ANNOTATION = "muster.dev/reclaim-within-cohort"
BORROW_WITHIN_COHORT_ANNOTATION = "muster.dev/borrow-within-cohort"
MAX_PRIORITY_THRESHOLD_ANNOTATION = "muster.dev/max-priority-threshold"
#: On a quota: its jobs admitted less than this many seconds ago are not victims of reclaim
#: (another quota taking back its min, or borrowing); the argument minRuntimeSeconds
#: otherwise.
MIN_RUNTIME_ANNOTATION = "muster.dev/min-runtime-seconds"
#: On a quota: a job of it that another quota's plan took back does not borrow again for
#: this many seconds, doubled for each time it was taken back (the argument
#: reborrowBackoffSeconds otherwise).
REBORROW_BACKOFF_ANNOTATION = "muster.dev/reborrow-backoff-seconds"
#: On a quota: for this many seconds after its newest pod was created, the part of its
#: ``min`` it does not use is lent only to jobs that save checkpoints (the argument
#: guaranteeReserveSeconds otherwise; 0: lent to any borrower).
GUARANTEE_RESERVE_ANNOTATION = "muster.dev/guarantee-reserve-seconds"
#: On a pod (its job's template): how long, once marked as a victim, it may take to save
#: its work and exit before it is evicted; capped by its quota's
#: ``muster.dev/max-preemption-notice-seconds``, else the argument
#: ``maxPreemptionNoticeSeconds`` (0: no notice).
PREEMPTION_NOTICE_ANNOTATION = "muster.dev/preemption-notice-seconds"
MAX_PREEMPTION_NOTICE_ANNOTATION = "muster.dev/max-preemption-notice-seconds"
#: On a quota: its weight in sharing what quotas borrow (a non-negative number, default
#: 1; 0: it borrows only what no other quota wants).
FAIR_SHARING_WEIGHT_ANNOTATION = "muster.dev/fair-sharing-weight"
#: On a quota: its jobs waiting longer than this many seconds are not passed by later,
#: smaller jobs of the same or lower priority for the room they need; the argument
#: starvationSeconds otherwise.
STARVATION_ANNOTATION = "muster.dev/starvation-seconds"
#: On a Job (label and signed annotation): the evictor suspended it to restart it, its
#: pods all victims of one plan, and resumes it once they are gone.
RESTARTING_KEY = "muster.dev/restarting"
#: On a pod, written by the job (its training code or operator): when it saved its work
#: (RFC 3339).  A time at or after its soft-eviction mark answers the notice: the pod is
#: evicted at once.
CHECKPOINTED_ANNOTATION = "muster.dev/checkpointed"
#: An indexed Job's pod's completion index (written by the Job controller): an elastic
#: job sheds its highest indexes first.
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
#: On a pod, written by the job: when it last saved its work (RFC 3339).  A victim's lost
#: work counts from the later of this and its start.
LAST_CHECKPOINT_ANNOTATION = "muster.dev/last-checkpoint"
#: On a pod (its job's template): the job saves its work every this many seconds from its
#: start; a victim's lost work counts from its last such save.
CHECKPOINT_INTERVAL_ANNOTATION = "muster.dev/checkpoint-interval-seconds"
STOP_POLICY_ANNOTATION = "muster.dev/stop-policy"

# Taint that kube-scheduler's NodeUnschedulable plugin lets tolerating pods past.
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"

# The implicit quota of pods that name none and have none in their namespace.
DEFAULT_QUOTA = "default"
