"""kube-scheduler's extender wire types (``k8s.io/kube-scheduler/extender/v1``).

The Go structs carry no JSON tags, so the top-level keys are the Go field
names in PascalCase, every field is always written (``null`` when unset),
and Go's decoder matches keys case-insensitively; these models do the same
on input (``pod`` or ``POD`` is ``Pod``) and always write the Go names.
Embedded Pod and Node objects are ordinary Kubernetes JSON, kept as dicts
for the core's parsers.  Unknown keys are ignored, as Go ignores them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _GoStruct(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _match_keys_like_go(cls, data: Any) -> Any:
        """Map keys to field names case-insensitively (an exact match wins), as Go does."""
        if not isinstance(data, dict):
            return data
        names = {name.lower(): name for name in cls.model_fields}
        matched: dict[str, Any] = {}
        for key, value in data.items():
            name = key if key in cls.model_fields else names.get(str(key).lower())
            if name is not None and (name not in matched or key == name):
                matched[name] = value
        return matched


class NodeList(_GoStruct):
    items: list[dict[str, Any]] = Field(default_factory=list)


class ExtenderArgs(_GoStruct):
    Pod: dict[str, Any] | None = None
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


class ExtenderFilterResult(_GoStruct):
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class HostPriority(_GoStruct):
    Host: str
    Score: int  # 0..10; Go decodes into int64, so never a float


class MetaPod(_GoStruct):
    UID: str


class MetaVictims(_GoStruct):
    Pods: list[MetaPod] = Field(default_factory=list)
    NumPDBViolations: int = 0


class Victims(_GoStruct):
    Pods: list[dict[str, Any]] = Field(default_factory=list)
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(_GoStruct):
    Pod: dict[str, Any] | None = None
    NodeNameToVictims: dict[str, Victims | None] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims | None] | None = None


class ExtenderPreemptionResult(_GoStruct):
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None


class ExtenderBindingArgs(_GoStruct):
    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class ExtenderBindingResult(_GoStruct):
    Error: str = ""
