"""Times as Kubernetes writes them (RFC 3339) and as Muster's records hold them (epoch
seconds), read and written in one place."""

from __future__ import annotations

import datetime as dt
import math
from typing import TypeGuard

from base.errors import ManifestError


def parse_time(value: object, field: str) -> float | None:
    """An RFC 3339 timestamp (string, or a datetime as YAML loads it) in epoch seconds."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        stamp = value
    elif isinstance(value, str):
        try:
            stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ManifestError(field, f"{value!r} is not an RFC 3339 timestamp") from None
    else:
        raise ManifestError(field, f"{value!r} is not an RFC 3339 timestamp")
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return stamp.timestamp()


#: 9999-12-31T23:59:59Z, the latest time RFC 3339 writes: no record of Muster's names a
#: later one.
LATEST_EPOCH = 253_402_300_799.0


def is_record_time(value: object) -> TypeGuard[int | float]:
    """A time a record of Muster's may name (epoch seconds, not negative, not past year
    9999)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and 0.0 <= value <= LATEST_EPOCH
    )


def claimed_time(text: str | None) -> float | None:
    """A time someone other than Muster wrote (a job's checkpoint annotation, say), read
    leniently: ``None`` when absent, not RFC 3339, or outside the times a record may name
    (what cannot be read claims nothing)."""
    try:
        stamp = parse_time(text, "")
    except ManifestError:
        return None
    return stamp if stamp is not None and is_record_time(stamp) else None


def seconds(text: str | None) -> float | None:
    """A duration written as a number of seconds: ``None`` when absent, or not a finite,
    non-negative number."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def format_time(epoch: float) -> str:
    """Epoch seconds as an RFC 3339 UTC timestamp, as Kubernetes writes them (a time
    outside years 1970 to 9999 as the nearest of those: never an error)."""
    bounded = min(max(epoch, 0.0), LATEST_EPOCH) if epoch == epoch else 0.0
    return dt.datetime.fromtimestamp(bounded, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
