"""Quantities and pod requests, by the Kubernetes rules."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from base.errors import QuantityError
from base.resources import (
    copies_that_fit,
    format_quantity,
    parse_quantity,
    pod_requests,
)


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("500m", 500),
        ("1", 1000),
        ("1.5", 1500),
        ("1e3", 1_000_000),
        ("1E3", 1_000_000),
        ("1e-3", 1),
        ("100Ki", 100 * 1024 * 1000),
        ("1.5Gi", 3 * 2**29 * 1000),
        ("8E", 8 * 10**18 * 1000),
        ("2k", 2_000_000),
        ("1n", 1),  # rounds up to the milli-unit, as MilliValue does
        ("0.0001", 1),
        ("0", 0),
        (".5", 500),
        ("+2", 2000),
        (4, 4000),
        (0.5, 500),
        (1e3, 1_000_000),
    ],
)
def test_parse_quantity_is_exact(text: object, milli: int) -> None:
    assert parse_quantity(text) == milli


SUFFIX_VALUES = {
    **{s: Fraction(2) ** (10 * i) for i, s in enumerate(["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])},
    **{s: Fraction(10) ** e for s, e in [("n", -9), ("u", -6), ("m", -3), ("k", 3), ("M", 6)]},
    **{s: Fraction(10) ** e for s, e in [("G", 9), ("T", 12), ("P", 15), ("E", 18)]},
}


@given(
    sign=st.sampled_from(["", "+"]),
    whole=st.integers(0, 10**9),
    fraction=st.one_of(st.none(), st.integers(0, 999)),
    suffix=st.sampled_from(sorted(SUFFIX_VALUES)),
)
def test_parse_quantity_agrees_with_exact_arithmetic(
    sign: str, whole: int, fraction: int | None, suffix: str
) -> None:
    number = str(whole) if fraction is None else f"{whole}.{fraction:03d}"
    expected = math.ceil(Fraction(number) * SUFFIX_VALUES[suffix] * 1000)
    assert parse_quantity(f"{sign}{number}{suffix}") == expected
    if fraction is None and whole:
        with pytest.raises(QuantityError):
            parse_quantity(f"-{number}{suffix}")


@pytest.mark.parametrize(
    "text",
    ["-1", "-500m", "abc", "1.2.3", "1Kb", "", "Gi", "1 Gi", "1e", True, None, [1], -3, "1e99"],
)
def test_parse_quantity_rejects_bad_values(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("resource", "milli", "text"),
    [
        ("cpu", 4000, "4"),
        ("cpu", 500, "500m"),
        ("memory", 8 * 2**30 * 1000, "8Gi"),
        ("memory", 1000 * 1000, "1000"),
        ("nvidia.com/gpu", 16000, "16"),
        ("memory", 0, "0"),
    ],
)
def test_format_quantity(resource: str, milli: int, text: str) -> None:
    assert format_quantity(resource, milli) == text
    assert parse_quantity(text) == milli


def container(name: str, **requests: str) -> dict[str, object]:
    return {"name": name, "resources": {"requests": requests}}


def test_containers_are_summed_and_a_pod_counts_one() -> None:
    spec = {"containers": [container("a", cpu="1", memory="1Gi"), container("b", cpu="500m")]}
    assert pod_requests(spec) == {"cpu": 1500, "memory": 2**30 * 1000, "pods": 1000}


def test_init_containers_are_maxed_and_overhead_added() -> None:
    spec = {
        "containers": [container("a", cpu="1")],
        "initContainers": [container("i1", cpu="3"), container("i2", cpu="2", memory="1Gi")],
        "overhead": {"cpu": "250m"},
    }
    assert pod_requests(spec) == {"cpu": 3250, "memory": 2**30 * 1000, "pods": 1000}


def test_sidecar_init_containers_add_up() -> None:
    sidecar = container("s", cpu="1") | {"restartPolicy": "Always"}
    spec = {
        "containers": [container("a", cpu="2")],
        # The regular init container runs beside the sidecar started before it: 1 + 4 = 5.
        "initContainers": [sidecar, container("i", cpu="4")],
    }
    assert pod_requests(spec)["cpu"] == 5000
    # A sidecar started after a big init container only adds to the steady state.
    spec["initContainers"] = [container("i", cpu="4"), sidecar]
    assert pod_requests(spec)["cpu"] == 4000


def test_limits_stand_in_for_missing_requests() -> None:
    spec = {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    assert pod_requests(spec)["nvidia.com/gpu"] == 2000


def test_bad_request_names_the_field() -> None:
    spec = {"containers": [container("a", cpu="lots")]}
    with pytest.raises(QuantityError, match=r"spec.containers\[0\].resources.requests.cpu"):
        pod_requests(spec)


def test_copies_that_fit() -> None:
    request = {"nvidia.com/gpu": 8000, "pods": 1000}
    assert copies_that_fit(request, {"nvidia.com/gpu": 24000, "pods": 110000}, 10) == 3
    assert copies_that_fit(request, {"nvidia.com/gpu": 24000, "pods": 2000}, 10) == 2
    assert copies_that_fit(request, {"nvidia.com/gpu": 24000, "pods": 110000}, 1) == 1
    assert copies_that_fit(request, {"pods": 110000}, 10) == 0
