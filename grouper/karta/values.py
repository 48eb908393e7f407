"""Go-compatible rendering and decoding of jq results (karta.md §3.2, §3.4, §7.1).

Upstream evaluates with gojq on JSON-decoded input, so every number from the object is a Go
``float64``. Ids, replica keys and group keys are rendered with Go's ``%v`` (``1``, ``1.5``,
``1e+06``, ``1e+21``, ``true``, ``map[a:1]``); ``byExpression`` results go through gojq's
``tostring`` (JSON encoding with ``1000000``, ``1e+21``, sorted keys). Python floats give the
shortest round-trip digits, which is what Go's ``-1`` precision means, so both are exact.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from grouper.model.errors import shown

_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _digits(f: float) -> tuple[str, int]:
    """Shortest decimal digits ``d`` and point position ``dp``: |f| = 0.d x 10**dp."""
    t = Decimal(repr(abs(f))).as_tuple()
    ds = "".join(str(d) for d in t.digits).lstrip("0")
    exp = int(t.exponent)
    stripped = ds.rstrip("0")
    exp += len(ds) - len(stripped)
    if not stripped:
        return "0", 1
    return stripped, len(stripped) + exp


def _e_format(digits: str, dp: int, *, min_exp_digits: int) -> str:
    exp = dp - 1
    mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    sign = "-" if exp < 0 else "+"
    return f"{mant}e{sign}{abs(exp):0{min_exp_digits}d}"


def _f_format(digits: str, dp: int) -> str:
    if dp <= 0:
        return "0." + "0" * (-dp) + digits
    if dp >= len(digits):
        return digits + "0" * (dp - len(digits))
    return digits[:dp] + "." + digits[dp:]


def go_float(f: float) -> str:
    """``fmt.Sprintf("%v", float64(f))``: shortest digits, exponent form when exp < -4 or >= 6
    (so ``1e+06`` but ``123456``; checked against Go 1.x output)."""
    if f != f:
        return "NaN"
    if f in (float("inf"), float("-inf")):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0:
        return "0"
    digits, dp = _digits(f)
    exp = dp - 1
    body = _e_format(digits, dp, min_exp_digits=2) if exp < -4 or exp >= 6 else _f_format(digits, dp)
    return ("-" if f < 0 else "") + body


def go_sprint(v: Any) -> str:
    """Go ``%v`` of a JSON-decoded value (numbers as float64)."""
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    if isinstance(v, int | float):
        return go_float(float(v))
    if isinstance(v, list):
        return "[" + " ".join(go_sprint(x) for x in v) + "]"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{go_sprint(v[k])}" for k in sorted(v)) + "]"
    return str(v)


def gojq_number(v: int | float) -> str:
    """gojq's JSON encoding of a number: plain decimal unless |v| < 1e-6 or >= 1e21."""
    if isinstance(v, int) and abs(v) < 2**53:
        return str(v)
    f = float(v)
    if f != f:
        return "null"
    f = max(min(f, 1.7976931348623157e308), -1.7976931348623157e308)
    if f == 0:
        return "0"
    digits, dp = _digits(f)
    a = abs(f)
    body = _e_format(digits, dp, min_exp_digits=1) if a < 1e-6 or a >= 1e21 else _f_format(digits, dp)
    return ("-" if f < 0 else "") + body


def gojq_json(v: Any) -> str:
    """Compact JSON as gojq writes it (sorted object keys)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return gojq_number(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ",".join(gojq_json(x) for x in v) + "]"
    if isinstance(v, dict):
        return (
            "{"
            + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:{gojq_json(v[k])}" for k in sorted(v))
            + "}"
        )
    return json.dumps(str(v))


def gojq_tostring(v: Any) -> str:
    """jq ``tostring``: strings unchanged, everything else JSON-encoded."""
    return v if isinstance(v, str) else gojq_json(v)


def go_quote(s: str) -> str:
    """Approximation of Go's ``%q`` (a JSON string literal is identical for printable text)."""
    return json.dumps(s, ensure_ascii=False)


def decode_int32(value: Any, what: str, index: int) -> int | None:
    """A scale value: ``null`` → unset; integral number or base-10 numeric string → int32.

    Mirrors upstream's decoding (numeric strings exist because annotation values are strings;
    fractional numbers fail to decode into int32). Raises ``ValueError`` with upstream's text.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{what} value {go_sprint(value)} at index {index} is not a number")
    if isinstance(value, str):
        if not _INT_RE.match(value):
            raise ValueError(f"{what} value {shown(go_quote(value))} at index {index} is not a number")
        n = int(value)
    elif isinstance(value, int):
        n = value
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")) or not value.is_integer():
            raise ValueError(f"{what} value {shown(go_sprint(value))} at index {index} is not an integer")
        n = int(value)
    else:
        raise ValueError(f"{what} value {shown(gojq_json(value))} at index {index} is not a number")
    if not INT32_MIN <= n <= INT32_MAX:
        raise ValueError(f"{what} value {shown(n)} at index {index} is out of range for int32")
    return n


def normalize_numbers(v: Any) -> Any:
    """Integral floats become ints so libjq prints them as gojq does (``1.0|tostring`` = ``"1"``).

    libjq 1.7 keeps number literals verbatim; gojq, fed by Go's JSON decoder, does not.
    Returns ``v`` itself when nothing changes (no copy for the common all-int object).
    """
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 2**53:
            return int(v)
        return v
    if isinstance(v, dict):
        changed = False
        out: dict[str, Any] = {}
        for k, x in v.items():
            y = normalize_numbers(x)
            changed = changed or y is not x
            out[k] = y
        return out if changed else v
    if isinstance(v, list):
        changed = False
        lst = []
        for x in v:
            y = normalize_numbers(x)
            changed = changed or y is not x
            lst.append(y)
        return lst if changed else v
    return v
