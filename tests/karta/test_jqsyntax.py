"""The read-only / bounded jq check works on tokens and a parse tree, not on substrings."""

from __future__ import annotations

import jq
import pytest

from grouper.karta.jqsyntax import JqSyntaxError, check, parse, root_fields, tokenize

ALLOWED = [
    ".spec.replicatedJobs[] | .replicas * .template.spec.parallelism",
    '.spec.template.metadata.annotations["autoscaling.knative.dev/min-scale"] // 1 | tonumber',
    '.spec.predictor | ( (.[]?  | select(type =="object" and .storageUri )))',
    ".spec.template as $t | $t.cliques[] | select(.name as $n | ([$t.podCliqueScalingGroups[]?.cliqueNames[]?] | index($n) | not))",
    "(.status.replicatedJobsStatus // []) | any(.active > 0 and (.ready // 0) == 0) and all(.failed == 0)",
    '.spec.suspend == true and (.status.state == "suspended" or (.status.state | not))',
    '"a = b |= c" | . == "x"',
    ".a <= 1, .b >= 2, .c != 3, .d == 4, .e < 5, .f > 6",
    '1 as $__x | {range: 1, "del": 2, $__x, if: 3, (.a): .b | .c, @base64 "k": 1, "k\\(1)": -1}',
    '"del(.a) \\("..")"',
    "def f: 1; f, f",
    "def f($a): $a + a; f(1)",
    "def f(f): f; f(1)",
    ". as $x | def f: $x; f",
    "def keys: 1; keys",
    'getpath(["a"]), [splits("a")], test("a"), limit(3; .[]), first(.[]), nth(1; .[])',
    "reduce .[] as $x (0; . + $x)",
    "foreach .[] as [$a, {b: $c}] (0; .+1; .)",
    "if . then 1 elif 2 then 3 else 4 end, if . then 1 end",
    'try error("x") catch ., try .a, .a?, .["a"]?, ."a-b", .a."b", .a.[0], .a[1:2], .a[:2], .a[1:]',
    "-1, -.a + 2, 1e3, 1.5e-3, .5",
    "label $out | foreach .[] as $x (0; .+1; if . > 2 then ., break $out else . end)",
    '@base64 "x\\(.a)y", @sh, @json',
    ". as [$a] ?// $a | $a",
    ".a # del(.x) in a comment\n| .b",
    '.a as {$b, c: $d, "e": $f, ("g"): $h} | 1',
    'to_entries[] | .key, map_values(. + 1), tostream, ascii_downcase, ltrimstr("x")',
]

REJECTED = {
    ".a = 1": "modifying operator '=' is not allowed",
    ".a |= 1": "modifying operator '|=' is not allowed",
    ".a += 1": "modifying operator '+=' is not allowed",
    ".a -= 1": "modifying operator '-=' is not allowed",
    ".a *= 1": "modifying operator '*=' is not allowed",
    ".a /= 1": "modifying operator '/=' is not allowed",
    ".a %= 1": "modifying operator '%=' is not allowed",
    ".a //= 1": "modifying operator '//=' is not allowed",
    "del(.a)": "del function is not allowed",
    "[range(10)]": "function 'range' may produce excessive output and is not allowed",
    "paths": "function 'paths' may produce excessive output and is not allowed",
    "recurse": "function 'recurse' may produce excessive output and is not allowed",
    "walk(.)": "function 'walk' may produce excessive output and is not allowed",
    "[limit(100000000; repeat(1))]": "function 'repeat' may produce excessive output and is not allowed",
    "..": "recursive descent operator '..' is not allowed",
    "..?": "recursive descent operator '..' is not allowed",
    "combinations": "function 'combinations' may produce excessive output and is not allowed",
    "while(true; .)": "function 'while' may not terminate and is not allowed",
    "until(false; .)": "function 'until' may not terminate and is not allowed",
    "env.HOME": "function 'env' reads outside the object or has side effects and is not allowed",
    "input": "function 'input' reads outside the object or has side effects and is not allowed",
    "[inputs]": "function 'inputs' reads outside the object or has side effects and is not allowed",
    "input_filename": "function 'input_filename' reads outside the object or has side effects and is not allowed",
    "debug": "function 'debug' reads outside the object or has side effects and is not allowed",
    "halt_error": "function 'halt_error' reads outside the object or has side effects and is not allowed",
    "$ENV.HOME": "variable '$ENV' is not allowed",
    "$__loc__": "variable '$__loc__' is not allowed",
    "{$__loc__}": "variable '$__loc__' is not allowed",
    "def f: f; f": "recursive function 'f/0' is not allowed (it may not terminate)",
    "def f: def g: f; g; f": "recursive function 'f/0' is not allowed (it may not terminate)",
    "def f(g): g; def h: f(h); h": "recursive function 'h/0' is not allowed (it may not terminate)",
    "def r: if . > 0 then . - 1 | r else . end; r": "recursive function 'r/0' is not allowed (it may not terminate)",
    # blacklisted names stay blacklisted inside defs, arguments, interpolation, objects, reduce, try
    "def f: del(.a); 1": "del function is not allowed",
    "first(.[] | select(. == (.. | 1)))": "recursive descent operator '..' is not allowed",
    '"\\(env)"': "function 'env' reads outside the object or has side effects and is not allowed",
    "{a: (.b |= 1)}": "modifying operator '|=' is not allowed",
    "reduce range(3) as $x (0; .)": "function 'range' may produce excessive output and is not allowed",
    "try (.a = 1) catch .": "modifying operator '=' is not allowed",
    ".[paths]": "function 'paths' may produce excessive output and is not allowed",
    "if . then walk(.) else . end": "function 'walk' may produce excessive output and is not allowed",
    "def range: 1; range": "function 'range' may produce excessive output and is not allowed",
}


@pytest.mark.parametrize("expr", ALLOWED)
def test_allowed(expr: str) -> None:
    jq.compile(expr)  # really valid jq
    assert check(expr) == []


@pytest.mark.parametrize(("expr", "reason"), REJECTED.items())
def test_rejected(expr: str, reason: str) -> None:
    jq.compile(expr)
    assert reason in check(expr)


def test_import_directive_rejected() -> None:
    assert check('include "x"; .') == ["module directive 'include' is not allowed"]
    assert check('import "x" as y; .') == ["module directive 'import' is not allowed"]


def test_tokens_keep_strings_and_comparisons_whole() -> None:
    toks = [(t.kind, t.text) for t in tokenize('.a == "x = y" | .b != 1')]
    assert toks == [
        ("FIELD", "a"),
        ("OP", "=="),
        ("STRING", "x = y"),
        ("OP", "|"),
        ("FIELD", "b"),
        ("OP", "!="),
        ("NUMBER", "1"),
        ("EOF", ""),
    ]


def test_interpolation_is_parsed() -> None:
    tree = parse('"a \\(.b | del(.c)) d"')
    assert any(n.kind == "call" and n.value == "del" for n in tree.walk())


def test_unparseable_raises() -> None:
    for bad in ['"unterminated', "(.a", ".a ]", "$", "{a b}"]:
        with pytest.raises(JqSyntaxError):
            check(bad)


def test_multiple_reasons_reported_once_each() -> None:
    assert check("del(.a), del(.b), .c = 1") == [
        "del function is not allowed",
        "modifying operator '=' is not allowed",
    ]


def test_too_deep_or_too_long_is_unanalysable_not_a_crash() -> None:
    with pytest.raises(JqSyntaxError, match="nests too deeply"):
        check("(" * 2000 + "1" + ")" * 2000)
    with pytest.raises(JqSyntaxError, match="nests too deeply"):
        check("1+" * 3000 + "1")
    with pytest.raises(JqSyntaxError, match="longer than"):
        check(".a" * 6000)


@pytest.mark.parametrize(
    ("expr", "fields"),
    [
        ('.metadata.labels["a"] == "x"', {"metadata"}),
        (".metadata as $m | $m.labels", {"metadata"}),
        (".spec.x[] | (.r // 1) * (.n // 1)", {"spec"}),
        ('"\\(.spec.a)-\\(.metadata.name)"', {"spec", "metadata"}),
        ('{a, "b", c: .d}', {"a", "b", "d"}),
        ('.["spec"].a, ."status".b', {"spec", "status"}),
        ("if .a then .b else .c end", {"a", "b", "c"}),
        ("reduce .spec.x[] as $i (0; . + $i)", {"spec"}),
        ('"1"', set()),
        (".", None),
        (". as $x | $x.spec", None),
        ("keys", None),
        ("select(.a)", None),
        ("if .a then .b end", None),  # no else: outputs the input
        (".[]", None),
        ("def f: .spec; f", None),
        ("..", None),
        # jq binds `as` to the whole try/catch term: the body `.` is the whole input (found by
        # test_properties.test_projection_is_sound: the projection to {a} gave a different result)
        ("(try .a catch . as $x | .)", None),
        ("try .a as $x | .", None),
        ("try .a as $x | $x", {"a"}),
        ("try .a catch .b", {"a"}),  # the catch body's input is the error, not the root
    ],
)
def test_root_fields(expr: str, fields: set[str] | None) -> None:
    jq.compile(expr)
    assert root_fields(expr) == (None if fields is None else frozenset(fields))
