"""Go durations (``time.ParseDuration`` / ``time.Duration.String()``), for every layer that reads one.

KAI parses annotation durations with Go's ``time.ParseDuration`` and stores ``metav1.Duration``,
which the API server prints with ``time.Duration.String()`` ("5m0s", "1h0m0s", "1.5s", "300ms").
We store that printed form, so a PodGroup written by us equals one written by KAI and a value
read back from the API server compares equal to what we computed. (Moved here from
``grouper.plugins.common`` so the grouping core can compare durations too; the plugins re-export it.)
"""

from __future__ import annotations

import json

_NS = 1
_US = 1000 * _NS
_MS = 1000 * _US
_S = 1000 * _MS
_M = 60 * _S
_H = 60 * _M
_UNITS = {"ns": _NS, "us": _US, "\u00b5s": _US, "\u03bcs": _US, "ms": _MS, "s": _S, "m": _M, "h": _H}
_U63 = 1 << 63


def parse_go_duration(text: str) -> int:
    """Nanoseconds of a Go duration string (``"1h30m"``, ``"1.5s"``, ``"-3m"``, ``"0"``).

    Follows ``time.ParseDuration``: a unit is required on every number except a lone ``0``;
    overflow of int64 nanoseconds is an error. Raises ``ValueError`` with Go's wording.
    """
    orig, s = text, text
    neg = False
    if s and s[0] in "+-":
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError(f"time: invalid duration {json.dumps(orig)}")
    total = 0
    while s:
        if not (s[0] == "." or "0" <= s[0] <= "9"):
            raise ValueError(f"time: invalid duration {json.dumps(orig)}")
        i = 0
        while i < len(s) and "0" <= s[i] <= "9":
            i += 1
        int_digits, s = s[:i], s[i:]
        frac_digits = ""
        if s.startswith("."):
            s = s[1:]
            j = 0
            while j < len(s) and "0" <= s[j] <= "9":
                j += 1
            frac_digits, s = s[:j], s[j:]
        if not int_digits and not frac_digits:
            raise ValueError(f"time: invalid duration {json.dumps(orig)}")
        k = 0
        while k < len(s) and s[k] != "." and not ("0" <= s[k] <= "9"):
            k += 1
        if k == 0:
            raise ValueError(f"time: missing unit in duration {json.dumps(orig)}")
        unit_name, s = s[:k], s[k:]
        unit = _UNITS.get(unit_name)
        if unit is None:
            raise ValueError(f"time: unknown unit {json.dumps(unit_name)} in duration {json.dumps(orig)}")
        whole = int(int_digits) if int_digits else 0
        if whole > _U63 // unit:
            raise ValueError(f"time: invalid duration {json.dumps(orig)}")
        value = whole * unit
        if frac_digits:
            # As Go's leadingFraction: digits past int64 precision are dropped, then float64 math.
            frac, scale, overflow = 0, 1.0, False
            for digit in frac_digits:
                if overflow or frac > (_U63 - 1) // 10 or frac * 10 + int(digit) > _U63:
                    overflow = True
                    continue
                frac, scale = frac * 10 + int(digit), scale * 10
            value += int(float(frac) * (unit / scale))
            if value > _U63:
                raise ValueError(f"time: invalid duration {json.dumps(orig)}")
        total += value
        if total > _U63:
            raise ValueError(f"time: invalid duration {json.dumps(orig)}")
    if neg:
        return -total
    if total > _U63 - 1:
        raise ValueError(f"time: invalid duration {json.dumps(orig)}")
    return total


def _frac(value: int, prec: int) -> str:
    whole, frac = divmod(value, 10**prec)
    if not frac:
        return str(whole)
    return f"{whole}.{str(frac).zfill(prec).rstrip('0')}"


def format_go_duration(ns: int) -> str:
    """``time.Duration(ns).String()``: ``"0s"``, ``"1.5s"``, ``"300ms"``, ``"1m30s"``, ``"1h0m0s"``."""
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u < _S:
        if u == 0:
            return "0s"
        if u < _US:
            return f"{sign}{u}ns"
        if u < _MS:
            return f"{sign}{_frac(u, 3)}\u00b5s"
        return f"{sign}{_frac(u, 6)}ms"
    seconds = _frac(u % _M, 9) + "s"
    minutes, hours = (u // _M) % 60, u // _H
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{sign}{minutes}m{seconds}"
    return f"{sign}{seconds}"


def normalize_go_duration(text: str, *, allow_negative: bool = True) -> str:
    """The API server's printed form of a Go duration string; ``ValueError`` when invalid."""
    ns = parse_go_duration(text)
    if ns < 0 and not allow_negative:
        raise ValueError(f"must be non-negative, got {text}")
    return format_go_duration(ns)
