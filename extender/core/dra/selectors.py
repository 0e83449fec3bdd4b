"""The device selectors Muster evaluates: a small, exact subset of DRA's CEL.

A DeviceClass or a claim's request selects devices with CEL expressions over
``device.driver``, ``device.attributes`` and ``device.capacity``.  Muster does not embed
a CEL interpreter; it reads the forms that cover what drivers' classes and most claims
write, and says plainly when an expression is anything else:

- ``true``;
- ``device.driver == "gpu.example.com"`` (or ``!=``);
- ``device.attributes["domain"].name OP literal``: ``OP`` one of ``== != < <= > >=``,
  the literal a string (``==``/``!=`` only), an integer or ``true``/``false``;
- ``device.capacity["domain"].name.compareTo(quantity("40Gi")) OP 0``, and
  ``.isGreaterThan(quantity(...))`` / ``.isLessThan(quantity(...))``;
- any of these joined by ``&&`` (parentheses around a term allowed).

An attribute or capacity a device does not have makes the term false (CEL would raise a
runtime error and kube-scheduler would not allocate the device either).  Anything else
(``||``, ``!``, ``in``, ``semver``, functions) is :class:`Unsupported`: the devices it
selects are *unknown*, and Muster does not plan on them (see :mod:`.catalog`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from base.errors import QuantityError
from base.resources import parse_quantity

#: An attribute's value: a string, an integer, a bool (versions are read as strings).
AttributeValue = str | int | bool


@dataclass(frozen=True, slots=True)
class DeviceFacts:
    """What a selector reads of one device: its driver, attributes and capacities keyed
    by qualified name (``domain/name``; an unqualified name gets the driver's domain),
    capacities in milli-units."""

    driver: str
    attributes: Mapping[str, AttributeValue]
    capacity: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Term:
    """One comparison: ``subject`` is ``driver``, ``attribute`` or ``capacity``; ``key``
    the qualified name (empty for the driver); ``value`` what it is compared with."""

    subject: str
    key: str
    operator: str
    value: AttributeValue


@dataclass(frozen=True, slots=True)
class Selector:
    """A conjunction of terms Muster evaluates (no terms: every device)."""

    expression: str
    terms: tuple[Term, ...]

    def matches(self, device: DeviceFacts) -> bool:
        return all(_holds(term, device) for term in self.terms)


@dataclass(frozen=True, slots=True)
class Unsupported:
    """An expression Muster does not evaluate, and why."""

    expression: str
    why: str


_STRING = r'"(?P<{0}>(?:[^"\\]|\\.)*)"'
_DRIVER = re.compile(r"^device\.driver\s*(?P<op>==|!=)\s*" + _STRING.format("lit") + r"$")
_ATTRIBUTE = re.compile(
    r'^device\.attributes\[\s*"(?P<domain>[^"]+)"\s*\]\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)'
    r"\s*(?P<op>==|!=|<=|>=|<|>)\s*(?P<lit>.+)$"
)
_CAPACITY = re.compile(
    r'^device\.capacity\[\s*"(?P<domain>[^"]+)"\s*\]\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)'
    r'\.(?P<method>compareTo|isGreaterThan|isLessThan)\(\s*quantity\(\s*"(?P<quantity>[^"]+)"'
    r"\s*\)\s*\)(?:\s*(?P<op>==|!=|<=|>=|<|>)\s*(?P<zero>-?\d+))?$"
)
_ORDER = ("<", "<=", ">", ">=")


def parse_selector(expression: str) -> Selector | Unsupported:
    """Read one CEL expression into a :class:`Selector`, or say why Muster does not."""
    text = expression.strip()
    if "||" in _outside_strings(text):
        return Unsupported(expression, "'||' is not evaluated")
    terms = _conjunction(text)
    if isinstance(terms, str):
        return Unsupported(expression, terms)
    return Selector(expression, tuple(terms))


def _conjunction(text: str) -> list[Term] | str:
    """The terms of ``a && b && ...`` (each perhaps in parentheses), or why not."""
    terms: list[Term] = []
    for part in _split_and(text):
        atom = part.strip()
        while atom.startswith("(") and atom.endswith(")") and _balanced(atom[1:-1]):
            atom = atom[1:-1].strip()
        if len(_split_and(atom)) > 1:
            inner = _conjunction(atom)
            if isinstance(inner, str):
                return inner
            terms.extend(inner)
            continue
        term = _term(atom)
        if isinstance(term, str):
            return term
        if term is not None:
            terms.append(term)
    return terms


def _term(atom: str) -> Term | str | None:
    """A term, ``None`` for ``true``, or why the atom is not read."""
    if atom == "true":
        return None
    match = _DRIVER.match(atom)
    if match:
        return Term("driver", "", match["op"], _unescape(match["lit"]))
    match = _ATTRIBUTE.match(atom)
    if match:
        literal = _literal(match["lit"].strip())
        if literal is None:
            return f"the value {match['lit'].strip()!r} is not a string, integer or bool literal"
        if match["op"] in _ORDER and (isinstance(literal, bool) or not isinstance(literal, int)):
            return f"'{match['op']}' is evaluated on integers only"
        return Term("attribute", f"{match['domain']}/{match['name']}", match["op"], literal)
    match = _CAPACITY.match(atom)
    if match:
        try:
            amount = parse_quantity(match["quantity"])
        except QuantityError as error:
            return f"quantity({match['quantity']!r}): {error.message}"
        method, op, zero = match["method"], match["op"], match["zero"]
        key = f"{match['domain']}/{match['name']}"
        if method == "compareTo":
            if op is None or zero != "0":
                return "compareTo(...) is evaluated only compared with 0"
            return Term("capacity", key, op, amount)
        if op is not None:
            return f"{method}(...) is evaluated only on its own"
        return Term("capacity", key, ">" if method == "isGreaterThan" else "<", amount)
    return "only device.driver, device.attributes and device.capacity comparisons are evaluated"


def _holds(term: Term, device: DeviceFacts) -> bool:
    if term.subject == "driver":
        actual: AttributeValue | None = device.driver
    elif term.subject == "attribute":
        actual = device.attributes.get(term.key)
    else:
        actual = device.capacity.get(term.key)
    if actual is None:
        return False  # CEL: no such key, a runtime error; the device is not allocated
    if term.operator == "==":
        return type(actual) is type(term.value) and actual == term.value
    if term.operator == "!=":
        return type(actual) is type(term.value) and actual != term.value
    if isinstance(actual, bool) or not isinstance(actual, int):
        return False
    assert isinstance(term.value, int)
    return {
        "<": actual < term.value,
        "<=": actual <= term.value,
        ">": actual > term.value,
        ">=": actual >= term.value,
    }[term.operator]


def _literal(text: str) -> AttributeValue | None:
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    match = re.fullmatch(_STRING.format("lit"), text)
    if match:
        return _unescape(match["lit"])
    return None


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _outside_strings(text: str) -> str:
    """``text`` with the insides of string literals blanked out."""
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)


def _split_and(text: str) -> list[str]:
    """``text`` split at the ``&&`` outside strings and parentheses."""
    parts, depth, start, index, quoted = [], 0, 0, 0, False
    while index < len(text):
        char = text[index]
        if quoted:
            if char == "\\":
                index += 1
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif text.startswith("&&", index) and depth == 0:
            parts.append(text[start:index])
            start = index + 2
            index += 1
        index += 1
    parts.append(text[start:])
    return parts


def _balanced(text: str) -> bool:
    depth = 0
    for char in _outside_strings(text):
        depth += (char == "(") - (char == ")")
        if depth < 0:
            return False
    return depth == 0
