"""Go/gojq-compatible rendering (checked against Go 1.x output) and int32 decoding."""

from __future__ import annotations

import pytest

from grouper.karta.values import decode_int32, go_float, go_sprint, gojq_tostring, normalize_numbers


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1, "1"),
        (1.5, "1.5"),
        (1e21, "1e+21"),
        (1e20, "1e+20"),
        (1000000, "1e+06"),
        (123456, "123456"),
        (1234567, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (-2.5, "-2.5"),
        (1e-7, "1e-07"),
        (3.0e10, "3e+10"),
        (100, "100"),
        (0, "0"),
    ],
)
def test_go_float(value: float, text: str) -> None:
    assert go_float(value) == text


def test_go_sprint_composites() -> None:
    assert (
        go_sprint({"b": [1, "x", True, None, {"c": 2.5}], "a": 1}) == "map[a:1 b:[1 x true <nil> map[c:2.5]]]"
    )
    assert go_sprint([1.0, "a b", None]) == "[1 a b <nil>]"
    assert (go_sprint(True), go_sprint(False), go_sprint("s")) == ("true", "false", "s")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("x", "x"),
        (True, "true"),
        (None, "null"),
        (1, "1"),
        (1e6, "1000000"),
        (1e21, "1e+21"),
        (1.5, "1.5"),
        (1e-7, "1e-7"),
        ({"b": 1, "a": [1, "x"]}, '{"a":[1,"x"],"b":1}'),
    ],
)
def test_gojq_tostring(value: object, text: str) -> None:
    assert gojq_tostring(value) == text


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), (3, 3), (3.0, 3), ("3", 3), ("-2", -2), ("+4", 4), (2**31 - 1, 2**31 - 1)],
)
def test_decode_int32(value: object, expected: int | None) -> None:
    assert decode_int32(value, "replicas", 0) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", 'replicas value "abc" at index 2 is not a number'),
        (" 3", 'replicas value " 3" at index 2 is not a number'),
        (1.5, "replicas value 1.5 at index 2 is not an integer"),
        (True, "replicas value true at index 2 is not a number"),
        ([1], "replicas value [1] at index 2 is not a number"),
        (2**31, "replicas value 2147483648 at index 2 is out of range"),
    ],
)
def test_decode_int32_errors(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        decode_int32(value, "replicas", 2)


def test_normalize_numbers_only_copies_when_needed() -> None:
    obj = {"a": [1, {"b": 2}], "c": "x"}
    assert normalize_numbers(obj) is obj
    assert normalize_numbers({"a": [1.0, 2.5, 1e300]}) == {"a": [1, 2.5, 1e300]}
