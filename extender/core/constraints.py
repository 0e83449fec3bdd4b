"""A pod's node constraints, as the core models them: tolerations and taints, and
required node affinity (node selector terms); and the label selectors other objects
(PodDisruptionBudgets) select pods with.

The types the parsers in :mod:`extender.core.objects` produce and
:mod:`extender.core.placement.nodefit` evaluates; invalid input is a
:class:`~base.errors.ManifestError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from base.errors import ManifestError
from base.fields import mapping, mappings, string, string_map


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # "Equal" or "Exists"
    value: str
    effect: str  # "" matches every effect


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule, PreferNoSchedule or NoExecute


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements that must all hold; a node matches a pod's affinity if any term matches."""

    match_expressions: tuple[SelectorRequirement, ...]
    match_fields: tuple[SelectorRequirement, ...]


def parse_node_selector(value: object, field: str) -> tuple[NodeSelectorTerm, ...]:
    selector = mapping(value, field)
    terms = []
    for index, term in enumerate(
        mappings(selector.get("nodeSelectorTerms"), f"{field}.nodeSelectorTerms")
    ):
        where = f"{field}.nodeSelectorTerms[{index}]"
        terms.append(
            NodeSelectorTerm(
                match_expressions=_requirements(
                    term.get("matchExpressions"), f"{where}.matchExpressions"
                ),
                match_fields=_requirements(term.get("matchFields"), f"{where}.matchFields"),
            )
        )
    return tuple(terms)


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A ``metav1.LabelSelector``: every label and every requirement must hold; an empty
    selector selects everything."""

    match_labels: tuple[tuple[str, str], ...]
    match_expressions: tuple[SelectorRequirement, ...]


def parse_label_selector(value: object, field: str) -> LabelSelector:
    selector = mapping(value, field)
    labels = string_map(selector.get("matchLabels"), f"{field}.matchLabels")
    expressions = _requirements(
        selector.get("matchExpressions"), f"{field}.matchExpressions", _LABEL_OPERATORS
    )
    return LabelSelector(tuple(sorted(labels.items())), expressions)


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _requirements(
    value: object, field: str, operators: tuple[str, ...] = _OPERATORS
) -> tuple[SelectorRequirement, ...]:
    requirements = []
    for index, item in enumerate(mappings(value, field)):
        where = f"{field}[{index}]"
        operator = item.get("operator")
        if operator not in operators:
            raise ManifestError(f"{where}.operator", f"unknown operator {operator!r}")
        raw_values = item.get("values") or []
        if not isinstance(raw_values, list):
            raise ManifestError(f"{where}.values", f"expected a list, got {raw_values!r}")
        values = tuple(string(v, f"{where}.values") for v in raw_values)
        if operator in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
            raise ManifestError(f"{where}.values", f"{operator} needs one integer value")
        if operator in ("In", "NotIn") and not values:
            raise ManifestError(f"{where}.values", f"{operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise ManifestError(f"{where}.values", f"{operator} takes no values")
        requirements.append(
            SelectorRequirement(
                key=string(item.get("key"), f"{where}.key"), operator=operator, values=values
            )
        )
    return tuple(requirements)


def parse_tolerations(value: object) -> tuple[Toleration, ...]:
    tolerations = []
    for index, item in enumerate(mappings(value, "spec.tolerations")):
        operator = item.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise ManifestError(f"spec.tolerations[{index}].operator", f"unknown {operator!r}")
        tolerations.append(
            Toleration(
                key=string(item.get("key") or "", f"spec.tolerations[{index}].key"),
                operator=operator,
                value=string(item.get("value") or "", f"spec.tolerations[{index}].value"),
                effect=string(item.get("effect") or "", f"spec.tolerations[{index}].effect"),
            )
        )
    return tuple(tolerations)


def selects(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Does a label selector select an object with these labels?"""
    return all(labels.get(key) == value for key, value in selector.match_labels) and all(
        requirement_holds(r, labels) for r in selector.match_expressions
    )


def requirement_holds(requirement: SelectorRequirement, labels: Mapping[str, str]) -> bool:
    """Does one selector requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt) hold?"""
    present = requirement.key in labels
    value = labels.get(requirement.key, "")
    operator = requirement.operator
    if operator == "In":
        return present and value in requirement.values
    if operator == "NotIn":
        return not present or value not in requirement.values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    # Gt / Lt compare integers; a label that is not one never matches.
    try:
        number, bound = int(value), int(requirement.values[0])
    except (ValueError, IndexError):
        return False
    return present and (number > bound if operator == "Gt" else number < bound)
