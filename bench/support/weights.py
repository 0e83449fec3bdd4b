"""The teams' fair-sharing weights of ``bench.peers --weights``: read from the command
line, and written as Koordinator's ElasticQuota reads them.

Each peer that has a weight gets it in its own form (see ``bench.peers``' docstring):
Muster the quota annotation ``muster.dev/fair-sharing-weight``, Kueue the ClusterQueue's
``spec.fairSharing.weight`` (:class:`localcluster.kueue_objects.TeamQuota`), Koordinator
the ElasticQuota annotation ``quota.scheduling.koordinator.sh/shared-weight``
(:func:`koordinator_shared_weight`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

#: Koordinator v1.6.0's ElasticQuota annotation (apis/extension/elastic_quota.go,
#: ``AnnotationSharedWeight``): a JSON ResourceList, per resource the quota's weight in
#: sharing what other quotas leave unused; absent, it is the quota's ``max``
#: (``GetSharedWeight``).
KOORDINATOR_SHARED_WEIGHT = "quota.scheduling.koordinator.sh/shared-weight"
_QUANTITY = re.compile(r"^(\d+)([A-Za-z]*)$")


def parse_weights(text: str, teams: int) -> list[float]:
    """``--weights W1,W2,...``: one positive number per team, in the teams' order.
    Raises ValueError naming the option otherwise."""
    parts = [part.strip() for part in text.split(",")]
    weights: list[float] = []
    for part in parts:
        try:
            weight = float(part)
        except ValueError:
            raise ValueError(f"--weights: {part!r} is not a number") from None
        if not (weight > 0 and math.isfinite(weight)):
            raise ValueError(f"--weights: {part!r} is not a positive number")
        weights.append(weight)
    if len(weights) != teams:
        raise ValueError(f"--weights: {len(weights)} weights given for --teams {teams}")
    return weights


def koordinator_shared_weight(maximum: Mapping[str, str], weight: float) -> str:
    """The shared-weight annotation's value for a quota of ``maximum`` (whole quantities
    with an optional suffix: ``"512"``, ``"8192Gi"``) and ``weight``: its ``max`` (what
    Koordinator weighs by when the annotation is absent) times ``weight``, per resource,
    rounded to a whole quantity; so equal weights weigh as no annotation does."""
    scaled: dict[str, str] = {}
    for resource, quantity in maximum.items():
        match = _QUANTITY.match(quantity)
        if match is None:
            raise ValueError(f"{resource}: {quantity!r} is not a whole quantity")
        scaled[resource] = f"{round(int(match[1]) * weight)}{match[2]}"
    return json.dumps(scaled, sort_keys=True)
