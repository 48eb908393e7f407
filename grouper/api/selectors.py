"""Kubernetes label selectors (``k=v,k2!=v,k3 in (a,b),k4 notin (c),k5,!k6``), parsed and matched.

Same grammar and key/value rules as ``k8s.io/apimachinery/pkg/labels``: requirements are ANDed;
``=``/``==`` equality, ``!=`` inequality (also true when the key is absent), ``in``/``notin`` sets,
bare ``key`` existence and ``!key`` absence. Malformed input raises :class:`SelectorError` naming the
offending part.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Operator = Literal["=", "!=", "in", "notin", "exists", "!"]

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY_RE = re.compile(rf"^(({_PREFIX})/)?{_NAME}$")
_VALUE_RE = re.compile(rf"^({_NAME})?$")


class SelectorError(ValueError):
    """The selector text is not a valid label selector."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present


@dataclass(frozen=True)
class Selector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        have = labels or {}
        return all(r.matches(have) for r in self.requirements)

    def __bool__(self) -> bool:
        return bool(self.requirements)


def _check_key(key: str, part: str) -> str:
    if not key:
        raise SelectorError(f"missing label key in {part!r}")
    if "/" in key and len(key.split("/", 1)[0]) > 253:
        raise SelectorError(f"label key prefix longer than 253 characters in {part!r}")
    if not _KEY_RE.match(key):
        raise SelectorError(f"invalid label key {key!r} in {part!r}")
    return key


def _check_value(value: str, part: str) -> str:
    if not _VALUE_RE.match(value):
        raise SelectorError(f"invalid label value {value!r} in {part!r}")
    return value


def _split(text: str) -> list[str]:
    """Split at commas that are not inside parentheses."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
            if depth > 1:
                raise SelectorError(f"nested parentheses in {text!r}")
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise SelectorError(f"unbalanced '(' in {text!r}")
    parts.append("".join(cur))
    return parts


_SET_RE = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")


def _requirement(part: str) -> Requirement:
    text = part.strip()
    if not text:
        raise SelectorError("empty requirement (stray comma?)")
    m = _SET_RE.match(text)
    if m:
        if not m.group("values").strip():
            raise SelectorError(f"empty value set in {part!r}")
        values = tuple(_check_value(v.strip(), part) for v in m.group("values").split(","))
        op: Operator = "in" if m.group("op") == "in" else "notin"
        return Requirement(_check_key(m.group("key"), part), op, tuple(sorted(set(values))))
    for token, eq_op in (("!=", "!="), ("==", "="), ("=", "=")):
        if token in text:
            key, _, value = text.partition(token)
            value = value.strip()
            if any(c in value for c in "=!()"):
                raise SelectorError(f"unexpected character in value of {part!r}")
            return Requirement(_check_key(key.strip(), part), eq_op, (_check_value(value, part),))  # type: ignore[arg-type]
    if text.startswith("!"):
        return Requirement(_check_key(text[1:].strip(), part), "!")
    if any(c.isspace() for c in text) or any(c in text for c in "()"):
        raise SelectorError(f"cannot parse {part!r}: expected key, !key, key=value, key!=value, key in (..)")
    return Requirement(_check_key(text, part), "exists")


def parse_selector(text: str | None) -> Selector:
    """Parse ``text``; None or blank means "everything"."""
    if text is None or not text.strip():
        return Selector()
    return Selector(tuple(_requirement(p) for p in _split(text)))


__all__ = ["Requirement", "Selector", "SelectorError", "parse_selector"]
