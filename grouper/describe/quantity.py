"""Kubernetes resource quantities: parse (``"500m"``, ``"1.5Gi"``, ``"1e3"``, ``4``) and format.

Exact decimal arithmetic; CPU is kept in millicores and memory in bytes, both rounded up as the
scheduler does.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|([eE][+-]?\d+))?$"
)


def parse_quantity(value: object) -> Decimal:
    """The quantity's value in base units. Raises ``ValueError`` for anything that is not one."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str):
        raise ValueError(f"not a quantity: {value!r}")
    m = _QUANTITY.match(value.strip())
    if not m:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix, exponent = m.groups()
    try:
        base = Decimal(number)
        if exponent:
            return base * (Decimal(10) ** int(exponent[1:]))
        if suffix in _BINARY:
            return base * _BINARY[suffix]
        return base * _DECIMAL[suffix or ""]
    except InvalidOperation as e:  # pragma: no cover - the regex admits only valid numbers
        raise ValueError(f"not a quantity: {value!r}") from e


def to_millis(value: object) -> int:
    """A CPU quantity in millicores, rounded up."""
    return math.ceil(parse_quantity(value) * 1000)


def to_units(value: object) -> int:
    """A quantity in whole base units (bytes, GPUs), rounded up."""
    return math.ceil(parse_quantity(value))


def format_cpu(millis: int) -> str:
    """Millicores as a quantity: ``2500`` -> ``2500m``, ``3000`` -> ``3``."""
    if millis % 1000 == 0:
        return str(millis // 1000)
    return f"{millis}m"


def format_memory(num_bytes: int) -> str:
    """Bytes as a quantity, preferring the largest exact binary unit, then decimal, then bytes."""
    if num_bytes == 0:
        return "0"
    for suffix, factor in reversed(_BINARY.items()):
        if num_bytes % factor == 0:
            return f"{num_bytes // factor}{suffix}"
    for suffix in ("E", "P", "T", "G", "M", "k"):
        factor = int(_DECIMAL[suffix])
        if num_bytes % factor == 0:
            return f"{num_bytes // factor}{suffix}"
    return str(num_bytes)
