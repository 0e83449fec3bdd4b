"""Muster's soft-eviction mark, read back: the job it names, when it was written, the
notice it gives, and whether Muster could have written it.

The mark is a JSON annotation Muster signs (:mod:`extender.core.records`); a pod's
:class:`~extender.core.objects.PodInfo` reads it here, and so do ``simulate``'s record
check and the evictor.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from base import keys
from base.errors import ManifestError
from base.times import is_record_time, parse_time


class Mark(NamedTuple):
    """A soft-eviction annotation read back: the job it names as preemptor and when it
    was written (``None`` for either missing or unreadable), and whether it is a mark
    Muster writes (a JSON object whose preemptor is a job or null and whose timestamp,
    if any, is RFC 3339 within years 1970 to 9999)."""

    preemptor: str | None
    timestamp: float | None
    well_formed: bool
    #: The notice (seconds) the victim has between its mark and its eviction.
    notice_seconds: float = 0.0
    #: Its Job is restarted whole rather than the pod evicted (:mod:`extender.core.restart`).
    restart_job: bool = False
    #: ``deleteOptions.gracePeriodSeconds``, when the mark asks for one (a whole number,
    #: not negative): the grace period its eviction gives the pod.
    grace_seconds: int | None = None


def read_mark(text: str) -> Mark:
    """The soft-eviction annotation ``text`` as a :class:`Mark`."""
    try:
        mark = json.loads(text)
    except (ValueError, RecursionError):
        return Mark(None, None, False)
    if not isinstance(mark, dict):
        return Mark(None, None, False)
    preemptor = mark.get("preemptor")
    well_formed = preemptor is None or (isinstance(preemptor, str) and preemptor.count("/") == 1)
    try:
        stamp = parse_time(mark.get("timestamp"), "timestamp")
    except ManifestError:
        stamp, well_formed = None, False
    if stamp is not None and not is_record_time(stamp):
        well_formed = False
    named = preemptor if isinstance(preemptor, str) and preemptor else None
    notice = mark.get("noticeSeconds", 0)
    if not is_notice(notice):
        notice, well_formed = 0, False
    restart = mark.get("restartJob", False)
    if not isinstance(restart, bool):
        restart, well_formed = False, False
    options = mark.get("deleteOptions")
    grace = options.get("gracePeriodSeconds") if isinstance(options, dict) else None
    asked = grace if isinstance(grace, int) and grace >= 0 else None
    return Mark(named, stamp, well_formed, float(notice), restart, asked)


#: The longest notice a mark may carry (a week): no argument allows more.
MAX_NOTICE_SECONDS = 7 * 24 * 3600


def is_notice(value: object) -> bool:
    """A notice a mark of Muster's may carry (seconds, 0 to a week)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and 0 <= value <= MAX_NOTICE_SECONDS
    )


def taken_back(obj: Mapping[str, Any]) -> bool:
    """Is Muster taking the mark of the pod object ``obj`` back?  Muster turns the pod's
    ``DisruptionTarget`` ``False`` (reason ``PreemptionAbandoned``) before it removes the
    mark: a pod still marked, with that condition no older than its mark, is one."""
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    text = annotations.get(keys.SOFT_EVICTION_KEY) if isinstance(annotations, Mapping) else None
    marked_at = read_mark(text).timestamp if isinstance(text, str) else None
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else ():
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == "DisruptionTarget"
            and condition.get("status") == "False"
            and condition.get("reason") == keys.PREEMPTION_ABANDONED
        ):
            try:
                at = parse_time(condition.get("lastTransitionTime"), "lastTransitionTime")
            except ManifestError:
                return False
            return marked_at is not None and at is not None and at >= marked_at
    return False
