"""Kubernetes quantities and resource lists, exact to the milli-unit.

Every amount in Muster is an ``int`` counting thousandths of the resource's
unit (millicores for ``cpu``, milli-bytes for ``memory``, milli-GPUs for
``nvidia.com/gpu``, milli-pods for ``pods``).  Parsing goes through
``fractions.Fraction`` and rounds *up* to the milli-unit, as Kubernetes'
``Quantity.MilliValue`` does, so accounting never touches a float.

A resource list is a plain ``dict[str, int]``; a resource absent from a list
is zero.  The helpers here are the only place that adds, subtracts or compares
them, and the only place that knows the Kubernetes pod-request rules.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from base.errors import QuantityError

#: A resource list: resource name → amount in milli-units.
Resources = dict[str, int]

#: The pod-count pseudo resource: every pod requests one of it.
PODS = "pods"
MILLI = 1000
ONE_POD: Mapping[str, int] = {PODS: MILLI}

_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
#: Suffix → its value in milli-units, for the suffixes worth at least a milli-unit: an
#: integer quantity with one of them is an exact integer product (the common case).
_SUFFIX_VALUES: dict[str, Fraction] = {
    **{suffix: Fraction(factor) for suffix, factor in _BINARY_SUFFIXES.items()},
    **_DECIMAL_SUFFIXES,
}
_MILLI_FACTORS = {
    suffix: int(value * MILLI) for suffix, value in _SUFFIX_VALUES.items() if value * MILLI >= 1
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)
# Resources whose amounts read best in binary units (8Gi rather than 8589934592).
_BYTE_RESOURCES = ("memory", "ephemeral-storage", "storage")


def parse_quantity(value: object) -> int:
    """Parse a Kubernetes quantity (``"500m"``, ``"1.5Gi"``, ``"1e3"``, ``4``) to milli-units.

    Fractions of a milli-unit round up, as in Kubernetes.  Negative and
    malformed values raise :class:`QuantityError`.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        if value < 0:
            raise QuantityError(f"{value!r} is negative")
        return value * MILLI
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a quantity")
        # YAML reads `0.5` as a float; its shortest repr is what the user wrote.
        return parse_quantity(repr(value))
    elif isinstance(value, str):
        match = _QUANTITY.match(value.strip())
        if match is None:
            raise QuantityError(f"{value!r} is not a quantity")
        if len(value) > 64:
            raise QuantityError(f"{value[:20]!r}... is too long to be a quantity")
        number, suffix = match["number"], match["suffix"] or ""
        if number.isdigit() and not match["exp"] and suffix in _MILLI_FACTORS:
            milli = int(number) * _MILLI_FACTORS[suffix]
            if match["sign"] == "-" and milli != 0:
                raise QuantityError(f"{value!r} is negative")
            return milli
        amount = Fraction(number)
        if match["exp"]:
            exponent = int(match["exp"][1:])
            if abs(exponent) > 30:
                raise QuantityError(f"{value!r} is out of range")
            amount *= Fraction(10) ** exponent
        else:
            amount *= _SUFFIX_VALUES[suffix]
        if match["sign"] == "-" and amount != 0:
            raise QuantityError(f"{value!r} is negative")
    else:
        raise QuantityError(f"{value!r} is not a quantity")
    if amount < 0:
        raise QuantityError(f"{value!r} is negative")
    return math.ceil(amount * MILLI)


def format_quantity(resource: str, milli: int) -> str:
    """Format an amount as Kubernetes would print it: ``"4"``, ``"500m"``, ``"8Gi"``."""
    if milli % MILLI:
        return f"{milli}m"
    whole = milli // MILLI
    if resource in _BYTE_RESOURCES or resource.startswith("hugepages-"):
        for suffix, factor in reversed(_BINARY_SUFFIXES.items()):
            if whole and whole % factor == 0:
                return f"{whole // factor}{suffix}"
    return str(whole)


def format_resources(resources: Mapping[str, int]) -> dict[str, str]:
    """Format a resource list as Kubernetes quantities, sorted by name."""
    return {name: format_quantity(name, resources[name]) for name in sorted(resources)}


def parse_resource_list(value: object, field: str) -> Resources:
    """Parse a ``{name: quantity}`` mapping; errors name ``field`` and the resource."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise QuantityError(f"expected a mapping of resource quantities, got {value!r}", field)
    parsed: Resources = {}
    for name, quantity in value.items():
        if not isinstance(name, str) or not name:
            raise QuantityError(f"resource name {name!r} is not a string", field)
        try:
            parsed[name] = parse_quantity(quantity)
        except QuantityError as error:
            raise QuantityError(error.message, f"{field}.{name}") from None
    return parsed


def add(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """``a + b``."""
    total = dict(a)
    for name, amount in b.items():
        total[name] = total.get(name, 0) + amount
    return total


def add_into(total: Resources, b: Mapping[str, int], sign: int = 1) -> None:
    """``total += sign * b`` in place (``sign`` is 1 or -1)."""
    for name, amount in b.items():
        total[name] = total.get(name, 0) + sign * amount


def subtract(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """``a - b``; the result may be negative where ``b`` exceeds ``a``."""
    total = dict(a)
    for name, amount in b.items():
        total[name] = total.get(name, 0) - amount
    return total


def total(lists: Iterable[Mapping[str, int]]) -> Resources:
    """The sum of several resource lists."""
    result: Resources = {}
    for item in lists:
        add_into(result, item)
    return result


def nonzero(resources: Mapping[str, int]) -> Resources:
    """The entries of a list that are not zero."""
    return {name: amount for name, amount in resources.items() if amount}


def shortfall(request: Mapping[str, int], free: Mapping[str, int]) -> str | None:
    """The first resource (by name) that ``request`` needs more of than ``free`` has."""
    for name in sorted(request):
        amount = request[name]
        if amount > 0 and amount > free.get(name, 0):
            return name
    return None


def fits(request: Mapping[str, int], free: Mapping[str, int]) -> bool:
    """Whether ``request`` fits in ``free`` in every resource it asks for."""
    return all(amount <= 0 or amount <= free.get(name, 0) for name, amount in request.items())


def copies_that_fit(request: Mapping[str, int], free: Mapping[str, int], limit: int) -> int:
    """How many copies of ``request`` fit in ``free``, at most ``limit``."""
    count = limit
    for name, amount in request.items():
        if amount > 0:
            available = free.get(name, 0)
            if available < amount:
                return 0
            count = min(count, available // amount)
    return count


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """A pod's effective request, by the Kubernetes rules, plus one ``pods``.

    Containers are summed; init containers are run one at a time, so the pod
    needs the largest of them, except restartable ("sidecar") init containers,
    which keep running and add up with everything started after them;
    ``spec.overhead`` is added on top.  Requests default to limits, as the
    API server would default them.
    """
    effective = total(_resource_requests(spec.get("containers"), "spec.containers"))
    sidecars: Resources = {}
    largest_init: Resources = {}
    for index, init in enumerate(_list(spec.get("initContainers"), "spec.initContainers")):
        request = _container_requests(init, f"spec.initContainers[{index}]")
        if isinstance(init, Mapping) and init.get("restartPolicy") == "Always":
            # A sidecar keeps running beside everything started after it.
            add_into(effective, request)
            add_into(sidecars, request)
            during = dict(sidecars)
        else:
            # A regular init container runs alone, beside the sidecars started before it.
            during = add(sidecars, request)
        for name, amount in during.items():
            largest_init[name] = max(largest_init.get(name, 0), amount)
    for name, amount in largest_init.items():
        effective[name] = max(effective.get(name, 0), amount)
    add_into(effective, parse_resource_list(spec.get("overhead"), "spec.overhead"))
    effective = nonzero(effective)
    effective[PODS] = MILLI
    return effective


def _list(value: object, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise QuantityError(f"expected a list, got {type(value).__name__}", field)
    return value


def _resource_requests(value: object, field: str) -> list[Resources]:
    return [
        _container_requests(item, f"{field}[{index}]")
        for index, item in enumerate(_list(value, field))
    ]


def _container_requests(container: object, field: str) -> Resources:
    if not isinstance(container, Mapping):
        raise QuantityError("expected a container object", field)
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise QuantityError("expected an object", f"{field}.resources")
    limits = parse_resource_list(resources.get("limits"), f"{field}.resources.limits")
    requests = parse_resource_list(resources.get("requests"), f"{field}.resources.requests")
    return limits | requests
