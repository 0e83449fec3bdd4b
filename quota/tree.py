"""Elastic quotas: their specs, their per-quota policies, and the quota tree.

An ``ElasticQuota`` (``scheduling.x-k8s.io`` or ``scheduling.sigs.k8s.io``)
has ``spec.min`` (guaranteed) and ``spec.max`` (ceiling).  A quota governs
the resources named in its ``min`` or ``max``; a resource absent from ``max``
is not limited by it, and one absent from ``min`` is guaranteed nothing.
Quotas form a tree through Koordinator's parent label; every ancestor's
``max`` bounds the sum over its subtree.  Quotas with no parent form one
cohort under an implicit root.

Kueue's preemption policies live on the quota as ``muster.dev/*``
annotations (docs/design.md); :class:`QuotaPolicy` holds them parsed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from base import keys
from base.errors import ManifestError
from base.resources import format_quantity, parse_resource_list
from base.times import seconds

_Policy = TypeVar("_Policy", bound=StrEnum)


class WithinQuota(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimWithinCohort(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class BorrowWithinCohort(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class StopPolicy(StrEnum):
    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"


_STOP_STRENGTH = {StopPolicy.NONE: 0, StopPolicy.HOLD: 1, StopPolicy.HOLD_AND_DRAIN: 2}


@dataclass(frozen=True, slots=True)
class QuotaPolicy:
    within_quota: WithinQuota = WithinQuota.LOWER_PRIORITY
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.ANY
    borrow_within_cohort: BorrowWithinCohort = BorrowWithinCohort.NEVER
    #: With borrowing, only victims at or below this priority.
    max_priority_threshold: int | None = None
    stop_policy: StopPolicy = StopPolicy.NONE
    #: Its jobs admitted less than this long ago are spared by reclaim; ``None``: the
    #: ``minRuntimeSeconds`` argument decides.
    min_runtime_seconds: float | None = None
    #: Its jobs taken back by another quota wait this long (doubled per time) before they
    #: borrow again; ``None``: the ``reborrowBackoffSeconds`` argument decides.
    reborrow_backoff_seconds: float | None = None
    #: For this long after its newest pod was created, its unused ``min`` is lent only to
    #: jobs that save checkpoints; ``None``: the ``guaranteeReserveSeconds`` argument.
    guarantee_reserve_seconds: float | None = None
    #: The longest notice its pods may declare before they are evicted; ``None``: the
    #: ``maxPreemptionNoticeSeconds`` argument decides.
    max_preemption_notice_seconds: float | None = None
    #: Its weight in sharing borrowed capacity (0: it borrows only what nobody else wants).
    fair_sharing_weight: float = 1.0
    #: Its jobs waiting longer than this are not passed by later smaller jobs; ``None``:
    #: the ``starvationSeconds`` argument decides.
    starvation_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class QuotaSpec:
    name: str
    namespace: str
    min: Mapping[str, int]
    max: Mapping[str, int]
    parent: str | None = None
    is_parent: bool = False
    policy: QuotaPolicy = field(default_factory=QuotaPolicy)
    #: Further namespaces whose pods this quota (and its subtree) admits, beside its own:
    #: Koordinator's ``quota.scheduling.koordinator.sh/namespaces`` (a JSON list), written
    #: by whoever may write quotas, never by a tenant (docs/security.md).
    namespaces: frozenset[str] = frozenset()

    @property
    def governed(self) -> frozenset[str]:
        """The resources this quota limits or guarantees."""
        return frozenset(self.min) | frozenset(self.max)


#: The implicit quota of pods that name none: guarantees nothing, limits nothing.
DEFAULT_QUOTA_SPEC = QuotaSpec(name=keys.DEFAULT_QUOTA, namespace="", min={}, max={})


def parse_elastic_quota(obj: Mapping[str, Any]) -> QuotaSpec:
    """An ElasticQuota object (camelCase JSON) → :class:`QuotaSpec`."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        raise ManifestError("spec", "expected an object")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError("metadata.name", f"expected a non-empty string, got {name!r}")
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    for where, value in (("metadata.labels", labels), ("metadata.annotations", annotations)):
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ManifestError(where, "expected a mapping of strings to strings")
    minimum = parse_resource_list(spec.get("min"), "spec.min")
    maximum = parse_resource_list(spec.get("max"), "spec.max")
    for resource in sorted(set(minimum) & set(maximum)):
        if minimum[resource] > maximum[resource]:
            raise ManifestError(
                f"spec.min.{resource}",
                f"min {format_quantity(resource, minimum[resource])} is greater than "
                f"max {format_quantity(resource, maximum[resource])}",
            )
    return QuotaSpec(
        name=name,
        namespace=str(metadata.get("namespace") or "default"),
        min=minimum,
        max=maximum,
        parent=labels.get(keys.QUOTA_PARENT_LABEL) or None,
        is_parent=labels.get(keys.QUOTA_IS_PARENT_LABEL) == "true",
        policy=parse_policy(annotations),
        namespaces=_parse_namespaces(annotations.get(keys.QUOTA_NAMESPACES_ANNOTATION)),
    )


def _parse_namespaces(text: str | None) -> frozenset[str]:
    if text is None:
        return frozenset()
    field_name = f"metadata.annotations.{keys.QUOTA_NAMESPACES_ANNOTATION}"
    try:
        value = json.loads(text)
    except ValueError:
        raise ManifestError(field_name, f"{text!r} is not a JSON list of namespaces") from None
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ManifestError(field_name, f"{text!r} is not a JSON list of namespaces")
    return frozenset(value)


def _seconds(annotations: Mapping[str, str], key: str) -> float | None:
    """A non-negative number of seconds from annotation ``key``; ``None`` if absent."""
    text = annotations.get(key)
    value = seconds(text)
    if text is not None and value is None:
        raise ManifestError(
            f"metadata.annotations.{key}", f"{text!r} is not a non-negative number of seconds"
        )
    return value


def parse_policy(annotations: Mapping[str, str]) -> QuotaPolicy:
    """The ``muster.dev/*`` policy annotations of a quota; absent ones take their defaults."""
    threshold_text = annotations.get(keys.MAX_PRIORITY_THRESHOLD_ANNOTATION)
    threshold = None
    if threshold_text is not None:
        try:
            threshold = int(threshold_text)
        except ValueError:
            raise ManifestError(
                f"metadata.annotations.{keys.MAX_PRIORITY_THRESHOLD_ANNOTATION}",
                f"{threshold_text!r} is not an integer",
            ) from None
    return QuotaPolicy(
        within_quota=_enum(annotations, keys.WITHIN_QUOTA_ANNOTATION, WithinQuota.LOWER_PRIORITY),
        reclaim_within_cohort=_enum(
            annotations, keys.RECLAIM_WITHIN_COHORT_ANNOTATION, ReclaimWithinCohort.ANY
        ),
        borrow_within_cohort=_enum(
            annotations, keys.BORROW_WITHIN_COHORT_ANNOTATION, BorrowWithinCohort.NEVER
        ),
        max_priority_threshold=threshold,
        stop_policy=_enum(annotations, keys.STOP_POLICY_ANNOTATION, StopPolicy.NONE),
        min_runtime_seconds=_seconds(annotations, keys.MIN_RUNTIME_ANNOTATION),
        reborrow_backoff_seconds=_seconds(annotations, keys.REBORROW_BACKOFF_ANNOTATION),
        guarantee_reserve_seconds=_seconds(annotations, keys.GUARANTEE_RESERVE_ANNOTATION),
        max_preemption_notice_seconds=_seconds(annotations, keys.MAX_PREEMPTION_NOTICE_ANNOTATION),
        fair_sharing_weight=_weight(annotations),
        starvation_seconds=_seconds(annotations, keys.STARVATION_ANNOTATION),
    )


def _weight(annotations: Mapping[str, str]) -> float:
    """The quota's fair-sharing weight: a finite non-negative number, default 1."""
    text = annotations.get(keys.FAIR_SHARING_WEIGHT_ANNOTATION)
    if text is None:
        return 1.0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ManifestError(
            f"metadata.annotations.{keys.FAIR_SHARING_WEIGHT_ANNOTATION}",
            f"{text!r} is not a non-negative number",
        )
    return value


def _enum(annotations: Mapping[str, str], key: str, default: _Policy) -> _Policy:
    text = annotations.get(key)
    if text is None:
        return default
    try:
        return type(default)(text)
    except ValueError:
        allowed = ", ".join(member.value for member in type(default))
        raise ManifestError(
            f"metadata.annotations.{key}", f"{text!r} is not one of {allowed}"
        ) from None


class QuotaMembershipError(LookupError):
    """A pod's quota label names a quota it may not use: one that does not exist, or one
    that does not admit the pod's namespace.  ``reason`` says which, naming the label."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class QuotaTreeError(ValueError):
    """Quotas that do not form a tree: ``quota`` names the culprit, ``field`` the field."""

    def __init__(self, quota: str, field: str, message: str) -> None:
        super().__init__(f"quota {quota}: {field}: {message}")
        self.quota = quota
        self.field = field
        self.message = message


class QuotaTree:
    """Quotas by name, with parents, ancestors and the default quota always present."""

    def __init__(self, specs: Iterable[QuotaSpec], default: QuotaSpec = DEFAULT_QUOTA_SPEC) -> None:
        self.specs: dict[str, QuotaSpec] = {}
        for spec in specs:
            if spec.name in self.specs:
                raise QuotaTreeError(spec.name, "metadata.name", "duplicate quota name")
            self.specs[spec.name] = spec
        #: Did an admin write an ElasticQuota named ``default`` (else it is ``default``)?
        self.default_is_explicit = keys.DEFAULT_QUOTA in self.specs
        self.specs.setdefault(keys.DEFAULT_QUOTA, default)
        self._ancestors: dict[str, tuple[str, ...]] = {}
        for name, spec in self.specs.items():
            if spec.parent is not None and spec.parent not in self.specs:
                raise QuotaTreeError(
                    name,
                    f"metadata.labels.{keys.QUOTA_PARENT_LABEL}",
                    f"unknown quota {spec.parent!r}",
                )
        for name in self.specs:
            chain: list[str] = []
            parent = self.specs[name].parent
            while parent is not None:
                if parent == name or parent in chain:
                    raise QuotaTreeError(
                        name, f"metadata.labels.{keys.QUOTA_PARENT_LABEL}", "parents form a cycle"
                    )
                chain.append(parent)
                parent = self.specs[parent].parent
            self._ancestors[name] = tuple(chain)
        self.parents = frozenset(
            spec.parent for spec in self.specs.values() if spec.parent is not None
        ) | frozenset(spec.name for spec in self.specs.values() if spec.is_parent)
        #: Each namespace's own leaf quota: the first by name of those declared in it,
        #: else the first by name of those listing it.
        self._by_namespace: dict[str, str] = {}
        leaves = [n for n in self.specs if n not in self.parents and n != keys.DEFAULT_QUOTA]
        for name in sorted(leaves, reverse=True):
            for namespace in self.specs[name].namespaces:
                self._by_namespace[namespace] = name
        for name in sorted(leaves, reverse=True):
            if self.specs[name].namespace:
                self._by_namespace[self.specs[name].namespace] = name
        #: The resources some quota names (in ``min`` or ``max``): those quota accounting
        #: is about.  One no quota names (cpu, where quotas name only GPUs) is nobody's
        #: guarantee and nobody's limit.
        self.governed: frozenset[str] = frozenset().union(
            *(spec.governed for spec in self.specs.values())
        )

    def __getitem__(self, name: str) -> QuotaSpec:
        return self.specs[name]

    def __contains__(self, name: object) -> bool:
        return name in self.specs

    def ancestors(self, name: str) -> tuple[str, ...]:
        """The quota's ancestors, nearest first."""
        return self._ancestors[name]

    def root(self, name: str) -> str:
        chain = self._ancestors[name]
        return chain[-1] if chain else name

    def path_below_common_ancestor(self, victim: str, preemptor: str) -> tuple[str, ...]:
        """``victim`` and its ancestors up to, not including, the first one shared with
        ``preemptor`` (all of them when the two trees meet only at the implicit root)."""
        shared = {preemptor, *self._ancestors[preemptor]}
        path = []
        for name in (victim, *self._ancestors[victim]):
            if name in shared:
                break
            path.append(name)
        return tuple(path)

    def stop_policy(self, name: str) -> tuple[StopPolicy, str]:
        """The stop policy in force for ``name`` and the quota that sets it: a parent's
        applies to its whole subtree, and the strongest on the way up wins
        (``HoldAndDrain`` over ``Hold`` over ``None``; the nearest quota on a tie)."""
        strongest, source = StopPolicy.NONE, name
        for quota in (name, *self._ancestors.get(name, ())):
            policy = self.specs[quota].policy.stop_policy
            if _STOP_STRENGTH[policy] > _STOP_STRENGTH[strongest]:
                strongest, source = policy, quota
        return strongest, source

    def quota_in_namespace(self, namespace: str) -> str | None:
        """The namespace's own quota: the first leaf quota by name declared in it, else
        the first listing it in its namespaces annotation, else ``None``."""
        return self._by_namespace.get(namespace)

    def admits(self, name: str, namespace: str) -> bool:
        """May pods of ``namespace`` be charged to quota ``name``?  Only where whoever
        writes quotas said so: the quota is declared in that namespace or lists it, or an
        ancestor lists it (a subtree granted to a team is the team's to divide).  Where
        an ancestor merely lives counts for nothing: quota objects often share one
        namespace, and its pods must not choose among them."""
        if namespace in self._declared_namespaces(name):
            return True
        return any(namespace in self.specs[quota].namespaces for quota in self._ancestors[name])

    def quota_for(self, namespace: str, named: str | None) -> str:
        """The quota a pod of ``namespace`` is charged to, its quota label naming ``named``
        (or none).  Membership is the admins' to decide, never the pod's: the label may
        only choose among the quotas that admit the namespace (raises
        :class:`QuotaMembershipError` otherwise, never moves the pod silently); a namespace
        that has a quota never falls to the default quota."""
        own = self._by_namespace.get(namespace)
        if not named:
            return own or keys.DEFAULT_QUOTA
        label = keys.QUOTA_NAME_LABEL
        if named not in self.specs:
            raise QuotaMembershipError(f"pod names quota {named!r}, which does not exist")
        if named == keys.DEFAULT_QUOTA and own is None:
            return named
        if named == keys.DEFAULT_QUOTA or not self.admits(named, namespace):
            home = f"its namespace's quota is {own}" if own else "its namespace has no quota"
            raise QuotaMembershipError(
                f"label {label}={named}: quota {named} does not admit namespace "
                f"{namespace} ({home}; an admin lists more namespaces in the quota's "
                f"{keys.QUOTA_NAMESPACES_ANNOTATION})"
            )
        return named

    def _declared_namespaces(self, name: str) -> frozenset[str]:
        spec = self.specs[name]
        own = frozenset((spec.namespace,)) if spec.namespace else frozenset()
        return own | spec.namespaces
