"""The four extender verbs on the wire: kube-scheduler's JSON in, Muster's answer out.

Each handler of :class:`VerbHandlers` takes a request body (bytes) and whether it may
wait for the state, decodes the body with the wire models (:mod:`extender.http.wire`;
every client mistake a :class:`~extender.http.asgi.ClientError`, a 400 naming the field),
calls :class:`~extender.service.Extender`, counts the decision by verb and outcome, and
encodes the answer.  :func:`extender.http.app.create_app` serves them, through the ASGI
layer (:mod:`extender.http.asgi`) or, under ``muster serve``, the HTTP protocol itself
(:mod:`extender.http.protocol`).  A pod the informer has read at this exact version is
taken as the informer read it, not parsed again.
"""

from __future__ import annotations

from typing import Any, TypeVar

from prometheus_client import Counter
from pydantic import BaseModel, ValidationError
from pydantic_core import to_json

from base.errors import ManifestError
from extender.core.objects import PodInfo, parse_pod
from extender.http import wire
from extender.http.asgi import ClientError, Verb
from extender.service import Extender

_Model = TypeVar("_Model", bound=BaseModel)


class VerbHandlers:
    """The verbs' handlers over ``extender``; ``decisions`` counts them by verb and
    outcome (``muster_decisions``)."""

    def __init__(self, extender: Extender, decisions: Counter) -> None:
        self.extender = extender
        self.decisions = decisions

    def routes(self) -> dict[str, Verb]:
        """Each verb's path and how it is served.

        Filter and prioritize answer on the event loop: they are short (tens to hundreds
        of microseconds), and kube-scheduler waits for each on its serial scheduling
        cycle, so a thread hand-off would only add latency.  Preempt may plan and bind
        calls the API: those go to a worker thread."""
        return {
            "/filter": Verb("filter", self.filter, inline=True),
            "/prioritize": Verb("prioritize", self.prioritize, inline=True),
            "/preempt": Verb("preempt", self.preempt, inline=False),
            "/bind": Verb("bind", self.bind, inline=False),
        }

    def filter(self, body: bytes, wait: bool) -> bytes:
        args, pod, names = _extender_args(body, self.extender, wait)
        result = self.extender.filter(pod, names, wait=wait)
        self.decisions.labels("filter", result.outcome.value).inc()
        nodes = None
        if args.NodeNames is None and args.Nodes is not None:
            passed = set(result.passed)
            items = zip(args.Nodes.items, names, strict=True)
            nodes = wire.NodeList(items=[node for node, name in items if name in passed])
        # Built from checked parts: model_construct skips re-validating every node name.
        answer_model = wire.ExtenderFilterResult.model_construct(
            NodeNames=result.passed if args.NodeNames is not None else None,
            Nodes=nodes,
            FailedNodes=result.failed,
            FailedAndUnresolvableNodes=result.unresolvable,
            Error="",
        )
        return to_json(answer_model)

    def prioritize(self, body: bytes, wait: bool) -> bytes:
        _args, pod, names = _extender_args(body, self.extender, wait)
        scores = self.extender.prioritize(pod, names, wait=wait)
        return to_json([{"Host": name, "Score": scores[name]} for name in names])

    def preempt(self, body: bytes, wait: bool) -> bytes:
        args = _decode(wire.ExtenderPreemptionArgs, body)
        pod = _pod(args.Pod, self.extender, wait)
        proposed, pdb = _proposed_victims(args)
        result = self.extender.preempt(pod, proposed)
        # A node's victims unchanged: kube-scheduler's count stands (it reads every
        # budget); changed: Muster's count for the victims it kept.
        violations = {
            node: pdb.get(node, 0) if uids == proposed.get(node) else result.pdb_violations[node]
            for node, uids in result.victims.items()
        }
        kept = sum(len(uids) for uids in result.victims.values())
        self.decisions.labels("preempt", "kept" if kept else "vetoed").inc()
        answer_model = wire.ExtenderPreemptionResult(
            NodeNameToMetaVictims={
                node: wire.MetaVictims(
                    Pods=[wire.MetaPod(UID=uid) for uid in uids],
                    NumPDBViolations=violations[node],
                )
                for node, uids in result.victims.items()
            }
        )
        return to_json(answer_model)

    def bind(self, body: bytes, wait: bool) -> bytes:
        args = _decode(wire.ExtenderBindingArgs, body)
        bound = self.extender.bind(args.PodNamespace, args.PodName, args.PodUID, args.Node)
        self.decisions.labels("bind", bound.outcome).inc()
        return to_json(wire.ExtenderBindingResult(Error=bound.error))


def _proposed_victims(
    args: wire.ExtenderPreemptionArgs,
) -> tuple[dict[str, list[str]], dict[str, int]]:
    """kube-scheduler's proposal, in either form: each node's victims (UIDs), and its
    count of PodDisruptionBudget violations for them."""
    proposed: dict[str, list[str]] = {}
    pdb: dict[str, int] = {}  # kube-scheduler's count, for its own proposal
    if args.NodeNameToMetaVictims is not None:
        for node, meta in args.NodeNameToMetaVictims.items():
            proposed[node] = [p.UID for p in meta.Pods] if meta else []
            pdb[node] = meta.NumPDBViolations if meta else 0
    elif args.NodeNameToVictims is not None:
        for node, victims in args.NodeNameToVictims.items():
            pods = victims.Pods if victims else []
            proposed[node] = [
                _victim_uid(victim, f"NodeNameToVictims.{node}.Pods[{i}]")
                for i, victim in enumerate(pods)
            ]
            pdb[node] = victims.NumPDBViolations if victims else 0
    return proposed, pdb


def _extender_args(
    body: bytes, extender: Extender, wait: bool
) -> tuple[wire.ExtenderArgs, PodInfo, list[str]]:
    """Decode ``ExtenderArgs``: the args, the pod, and the node names in either mode."""
    args = _decode(wire.ExtenderArgs, body)
    pod = _pod(args.Pod, extender, wait)
    if args.NodeNames is not None:
        names = args.NodeNames
    elif args.Nodes is not None:
        names = [_node_name(node, index) for index, node in enumerate(args.Nodes.items)]
    else:
        names = []
    return args, pod, names


def _decode(model: type[_Model], body: bytes) -> _Model:
    if not body.strip():
        raise ClientError(400, "empty request body: expected a JSON object")
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(body)"
        if first["type"] == "json_invalid":
            raise ClientError(400, f"malformed JSON: {first['msg']}") from None
        raise ClientError(400, f"{where}: {first['msg']}") from None


def _pod(obj: dict[str, Any] | None, extender: Extender, wait: bool) -> PodInfo:
    if obj is None:
        raise ClientError(400, "Pod: required")
    known = _known_pod(obj, extender, wait)
    if known is not None:
        return known
    try:
        return parse_pod(obj)
    except ManifestError as error:
        raise ClientError(400, f"Pod.{error.field}: {error.message}") from None


def _known_pod(obj: dict[str, Any], extender: Extender, wait: bool) -> PodInfo | None:
    """The informers' reading of this exact pod version, when Muster has one."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return None
    uid, version, name = metadata.get("uid"), metadata.get("resourceVersion"), metadata.get("name")
    namespace = metadata.get("namespace") or "default"
    if not (
        isinstance(uid, str)
        and isinstance(version, str)
        and isinstance(name, str)
        and isinstance(namespace, str)
    ):
        return None
    return extender.known_pending_pod(f"{namespace}/{name}", uid, version, wait=wait)


def _node_name(node: dict[str, Any], index: int) -> str:
    metadata = node.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise ClientError(400, f"Nodes.items[{index}].metadata.name: required")
    return name


def _victim_uid(victim: dict[str, Any], where: str) -> str:
    metadata = victim.get("metadata")
    uid = metadata.get("uid") if isinstance(metadata, dict) else None
    if not isinstance(uid, str) or not uid:
        raise ClientError(400, f"{where}.metadata.uid: required")
    return uid
