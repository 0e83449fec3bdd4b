"""The soak's invariants, checked over what the API says: pure functions and one observer.

``Observer`` is fed every version of the soak's pods in the order the API's watch
delivers them (and every relist, and the quotas as they change); it keeps a
``ClusterState`` of Muster's own core fed with those pods, so quota usage is Muster's
own accounting (quota resolution, requests, preemptible or not) recomputed from the
API, not a copy of it.  It flags, as they happen:

* a soft-eviction mark naming a preemptor job on a pod that is not preemptible;
* a pod whose mark changes from one preemptor job to another (marked by two jobs);
* a pod binding while its quota, or an ancestor, has more bound than its ``max``
  (unless that quota's bounds were edited within ``edit_grace`` seconds: room admitted
  before a lowered ``max`` may still bind; those binds are counted apart);
* a quota taken below its ``min`` by reclaim: when a pod of quota Q is marked for a job of
  another quota, Q's usage with every pod marked for a job gone (the victims in flight,
  this one included) is below Q's ``min`` in a resource its ``min`` names (a resource it
  does not name is guaranteed nothing).  Q's own pods finishing or deleted by the soak
  count as still there: the check is of what Muster's evictions take away.  Checked for
  Q and each ancestor not holding the preemptor's quota (a reclaim between siblings
  leaves their parent's usage as it was); a quota edited within ``edit_grace`` is
  skipped (counted apart);
* (``jobs_left_suspended``, at the end) a Job the evictor suspended to restart it and
  did not resume;
* (``scan``) a victim gang partly marked: a pod of the gang marked for a job and still
  running while another bound pod of the gang is unmarked, for ``partial_grace``
  seconds (marks are written one pod at a time, so an instant of it is normal).

The pure functions check the end state (``end_state_violations``), count successful
evictions in kube-apiserver's audit log (``evictions_in_audit``), and compute
percentiles.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extender.core.config import MusterArgs
from extender.core.jobs import is_preemptible
from extender.core.objects import PodInfo, parse_node, parse_pod
from extender.core.state import ClusterState
from quota.tree import parse_elastic_quota

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    at: float
    detail: str

    def __str__(self) -> str:
        return f"[{self.at:8.1f}s] {self.kind}: {self.detail}"


@dataclass
class Figures:
    """What the observer counted (beside its violations)."""

    #: pod UID → the preemptor jobs its marks named, in order.
    marks: dict[str, list[str]] = field(default_factory=dict)
    #: marks naming no preemptor job (a gang given up, a drain).
    other_marks: int = 0
    #: pods marked again for another job after an earlier mark was taken back.
    remarked: int = 0
    #: binds over a ``max`` edited within ``edit_grace`` seconds (not violations).
    over_max_after_edit: int = 0
    #: reclaim marks checked against their victim quota's ``min``, and those skipped for an
    #: edit within ``edit_grace`` seconds.
    reclaims_checked: int = 0
    below_min_after_edit: int = 0
    #: pod key → when it was first seen bound (seconds on the soak's clock).
    bound_at: dict[str, float] = field(default_factory=dict)


class Observer:
    """Continuous invariants over the stream of pod versions (see the module docstring)."""

    def __init__(
        self,
        *,
        args: MusterArgs | None = None,
        nodes: Iterable[Mapping[str, Any]] = (),
        partial_grace: float = 20.0,
        edit_grace: float = 70.0,
    ) -> None:
        self.args = args or MusterArgs()
        self.state = ClusterState(self.args)
        for node in nodes:
            self.state.upsert_node(parse_node(node))
        self.partial_grace = partial_grace
        self.edit_grace = edit_grace
        self.violations: list[Violation] = []
        self.figures = Figures()
        self._edited: dict[str, float] = {}  # quota → when its bounds last changed
        self._bounds: dict[str, tuple[Mapping[str, int], Mapping[str, int]]] = {}
        self._partial_since: dict[str, float] = {}
        self._partial_reported: set[str] = set()

    # ---- feeding

    def set_quotas(self, objects: Iterable[Mapping[str, Any]], at: float) -> None:
        """The ElasticQuotas as they are now; a quota whose min or max changed is edited."""
        specs = [parse_elastic_quota(obj) for obj in objects]
        for spec in specs:
            bounds = (dict(spec.min), dict(spec.max))
            if spec.name in self._bounds and self._bounds[spec.name] != bounds:
                self._edited[spec.name] = at
            self._bounds[spec.name] = bounds
        self.state.set_quotas(specs)

    def note_edit(self, quota: str, at: float) -> None:
        """The soak is about to edit ``quota``: binds from now on are within its edit's
        grace even before the next ``set_quotas`` shows the new bounds (Muster's informer
        may see the edit first)."""
        self._edited[quota] = at

    def pod_event(self, kind: str, obj: Mapping[str, Any], at: float) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) or listed pod (SYNC)."""
        if kind == "DELETED":
            metadata = obj.get("metadata") or {}
            self.state.remove_pod(f"{metadata.get('namespace')}/{metadata.get('name')}")
            return
        pod = parse_pod(obj)
        old = self.state.pods.get(pod.key)
        if old is not None and old.uid != pod.uid:
            self.state.remove_pod(pod.key)
            old = None
        new_mark = self._check_mark(old, pod, at)
        self.state.upsert_pod(pod)
        if new_mark and pod.node_name is not None and not pod.finished:
            self._check_reclaim_keeps_min(pod, at)
        if pod.node_name is not None and (old is None or old.node_name is None):
            self.figures.bound_at.setdefault(pod.key, at)
            if not pod.finished:
                self._check_bind(pod, at)

    def relist(self, objects: Sequence[Mapping[str, Any]], at: float) -> None:
        """A complete list: pods not in it are gone; each listed one is an event."""
        listed = {
            f"{(o.get('metadata') or {}).get('namespace')}/{(o.get('metadata') or {}).get('name')}"
            for o in objects
        }
        for key in [k for k in self.state.pods if k not in listed]:
            self.state.remove_pod(key)
        for obj in objects:
            self.pod_event("SYNC", obj, at)

    # ---- continuous checks

    def _check_mark(self, old: PodInfo | None, pod: PodInfo, at: float) -> bool:
        """Check a mark; return whether it is a new mark naming a preemptor job."""
        if not pod.soft_evicted:
            return False
        if pod.marked_for is None:
            if old is None or not old.soft_evicted:
                self.figures.other_marks += 1
            return False
        if old is not None and old.soft_evicted and old.marked_for == pod.marked_for:
            return False  # the same mark, another version of the pod
        if old is not None and old.soft_evicted and old.marked_for is not None:
            self._violate(
                "pod marked by two jobs",
                at,
                f"{pod.key}: marked for {old.marked_for}, then for {pod.marked_for}",
            )
        history = self.figures.marks.setdefault(pod.uid, [])
        if history and history[-1] != pod.marked_for:
            self.figures.remarked += 1
        history.append(pod.marked_for)
        if not is_preemptible(pod, self.args):
            self._violate("non-preemptible victim", at, f"{pod.key} marked for {pod.marked_for}")
        return True

    def _check_reclaim_keeps_min(self, victim: PodInfo, at: float) -> None:
        quota = self.state.quota_name(victim)
        preemptor = self._preemptor_quota(victim)
        if quota is None or preemptor is None:
            return
        reclaimed = [
            p
            for p in self.state.pods.values()
            if p.node_name is not None and not p.finished and p.marked_for is not None
        ]
        for name in (quota, *self.state.tree.ancestors(quota)):
            if name == preemptor or name in self.state.tree.ancestors(preemptor):
                break  # the preemptor's own quota or an ancestor of it: usage stays inside
            self.figures.reclaims_checked += 1
            if at - self._edited.get(name, -math.inf) < self.edit_grace:
                self.figures.below_min_after_edit += 1
                continue
            spec = self.state.tree[name]
            left = dict(self.state.ledger[name].subtree_used)
            gone = [p for p in reclaimed if self._in_subtree(p, name)]
            for p in gone:
                for resource, amount in p.requests.items():
                    left[resource] = left.get(resource, 0) - amount
            below = {r: left.get(r, 0) for r, least in spec.min.items() if left.get(r, 0) < least}
            if below:
                self._violate(
                    "quota taken below its min by reclaim",
                    at,
                    f"{victim.key} marked for {victim.marked_for} (quota {preemptor}): quota "
                    f"{name} keeps {below} of min {dict(spec.min)} once its marked pods "
                    f"{sorted((p.key, p.marked_for) for p in gone)} are gone",
                )

    def _preemptor_quota(self, victim: PodInfo) -> str | None:
        """The quota of the job a mark names: that of a pod of it the observer has seen."""
        assert victim.marked_for is not None
        pods = self.state.members.job_pods(victim.marked_for)
        return self.state.quota_name(pods[0]) if pods else None

    def _check_bind(self, pod: PodInfo, at: float) -> None:
        quota = self.state.quota_name(pod)
        if quota is None:
            return
        for name in (quota, *self.state.tree.ancestors(quota)):
            spec = self.state.tree[name]
            used = self.state.ledger[name].subtree_used
            over = {r: used.get(r, 0) for r, limit in spec.max.items() if used.get(r, 0) > limit}
            if not over:
                continue
            if at - self._edited.get(name, -math.inf) < self.edit_grace:
                self.figures.over_max_after_edit += 1
                continue
            leaving = sorted(
                p.key
                for p in self.state.pods.values()
                if p.node_name is not None
                and not p.finished
                and p.departing
                and self._in_subtree(p, name)
            )
            self._violate(
                "bound beyond a quota's max",
                at,
                f"{pod.key} (job {pod.job}) bound on {pod.node_name}: quota {name} uses "
                f"{over} of max {dict(spec.max)}; bound pods of its subtree on their way out "
                f"(marked or terminating): {leaving}",
            )

    def _in_subtree(self, pod: PodInfo, quota: str) -> bool:
        name = self.state.quota_name(pod)
        return name is not None and (name == quota or quota in self.state.tree.ancestors(name))

    def scan(self, at: float) -> None:
        """The checks over the whole state at one instant (call it every few seconds)."""
        partial = set()
        for job in sorted({p.job for p in self.state.pods.values()}):
            pods = [p for p in self.state.members.job_pods(job) if p.node_name and not p.finished]
            marked_for = {p.marked_for for p in pods if p.marked_for and not p.terminating}
            unmarked = [p.key for p in pods if not p.departing]
            if not marked_for or not unmarked:
                continue
            partial.add(job)
            since = self._partial_since.setdefault(job, at)
            if at - since >= self.partial_grace and job not in self._partial_reported:
                self._partial_reported.add(job)
                self._violate(
                    "victim gang partly marked",
                    at,
                    f"gang {job} marked for {sorted(marked_for)} since {since:.1f}s, "
                    f"but {unmarked} still bound and unmarked",
                )
        for job in list(self._partial_since):
            if job not in partial:
                del self._partial_since[job]

    def _violate(self, kind: str, at: float, detail: str) -> None:
        self.violations.append(Violation(kind, at, detail))


# ---- the end state


def end_state_violations(
    pods: Sequence[Mapping[str, Any]],
    explain: Callable[[str], Mapping[str, Any] | None],
    jobs: Mapping[str, Mapping[str, Any]],
    at: float,
) -> list[Violation]:
    """After the stream and the faults ended and the cluster settled:

    * every pod still pending has a reason in ``explain(key)`` (the leader's
      ``/debug/pods/<key>``): a decision with an outcome, or a quota refusal;
    * every reservation in ``jobs`` (the leader's ``/debug/jobs``) belongs to a job that
      still has pending pods in ``pods``;
    * no running pod carries a mark naming a job that has no pods left.
    """
    infos = [parse_pod(obj) for obj in pods]
    live = [p for p in infos if not p.finished and not p.terminating]
    by_job: dict[str, list[PodInfo]] = {}
    for pod in live:
        by_job.setdefault(pod.job, []).append(pod)
    violations = []
    for pod in live:
        if pod.node_name is not None:
            continue
        answer = explain(pod.key) or {}
        decisions = [d for d in answer.get("decisions") or [] if d.get("outcome")]
        refused = answer.get("quotaAdmission") not in (None, "admitted")
        if not decisions and not refused:
            violations.append(
                Violation("pending without a reason", at, f"{pod.key}: /debug/pods says {answer}")
            )
    for job, entry in sorted(jobs.items()):
        if entry.get("reservation") is None:
            continue
        if not any(p.node_name is None for p in by_job.get(job, [])):
            violations.append(
                Violation(
                    "reservation outlives its job",
                    at,
                    f"{job} holds {entry['reservation']} with no pending pod left",
                )
            )
    for pod in live:
        if pod.marked_for is not None and pod.marked_for not in by_job:
            violations.append(
                Violation(
                    "mark outlives its job", at, f"{pod.key} still marked for {pod.marked_for}"
                )
            )
    return violations


def evictions_in_audit(lines: Iterable[str]) -> Counter[str]:
    """Successful evictions (``create pods/eviction`` answered 2xx) per pod key, from
    kube-apiserver's audit log (JSON lines, stage ``ResponseComplete``)."""
    counts: Counter[str] = Counter()
    for line in lines:
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut short when kube-apiserver was killed
        ref = event.get("objectRef") or {}
        code = (event.get("responseStatus") or {}).get("code", 0)
        if (
            event.get("stage") == "ResponseComplete"
            and event.get("verb") == "create"
            and ref.get("resource") == "pods"
            and ref.get("subresource") == "eviction"
            and 200 <= int(code) < 300
        ):
            counts[f"{ref.get('namespace')}/{ref.get('name')}"] += 1
    return counts


def double_evictions(counts: Mapping[str, int], at: float) -> list[Violation]:
    return [
        Violation("pod evicted twice", at, f"{key}: {count} successful evictions")
        for key, count in sorted(counts.items())
        if count > 1
    ]


def jobs_left_suspended(jobs: Sequence[Mapping[str, Any]], at: float) -> list[Violation]:
    """The soak's Jobs still suspended, or still carrying the evictor's
    ``muster.dev/restarting`` record, once it settled: the soak suspends none itself, so
    each is a Job the evictor suspended to restart it and did not resume."""
    violations = []
    for job in jobs:
        metadata = job.get("metadata") or {}
        restarting = "muster.dev/restarting" in (metadata.get("labels") or {})
        if restarting or (job.get("spec") or {}).get("suspend"):
            name = f"{metadata.get('namespace')}/{metadata.get('name')}"
            violations.append(Violation("job left suspended", at, name))
    return violations
