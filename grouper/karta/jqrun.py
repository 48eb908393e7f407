"""Running jq: compiled-program cache, object serialization, output bounds, fused programs.

Costs measured with libjq 1.7.1 (PyPI ``jq``): compiling a program ~1.5-2 ms; handing an 18 KB
object to jq ~1-2 ms per run (it is re-parsed on every run). So:

* programs are compiled once and kept in a module-level LRU keyed by program text
  (``PROGRAMS``; switchable off for benchmarks);
* an object is serialized once per (uid, resourceVersion) (``ObjectTexts``) — with sorted keys,
  so libjq iterates objects in gojq's order, and with integral floats turned into ints, so
  ``tostring`` and interpolation print numbers as gojq does;
* jq only gets the top-level fields a batch of expressions can read (``jqsyntax.root_fields``):
  a pod's ``metadata`` rather than the whole pod, a workload without its ``metadata`` — parsing
  the input is most of a run's cost;
* all expressions of one kind that a definition evaluates on one object are *fused* into a single
  program ``[ (try ([limit(N; (e1))] | [true, .]) catch [false, .]), ... ]`` — one parse of the
  object instead of one per expression, while each expression keeps its own outputs and error.

Bounds: each expression may produce at most ``max_outputs - 1`` outputs (upstream: the 1000th
output already fails with "query results exceed the allowed number 1000"); ``limit`` cuts a huge
generator off early. libjq cannot be interrupted and folds constants while compiling, so a runner
that can compile (``compile_errors``) is asked to compile too: the sandbox never lets libjq see
untrusted text in this process. ``InProcessRunner`` is for trusted text only.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import jq
import orjson

from grouper.karta.values import normalize_numbers

DEFAULT_MAX_OUTPUTS = 1000


class JqError(Exception):
    """A jq program failed to compile or run; ``str()`` is libjq's message."""


class JqCompileError(JqError):
    pass


class JqTimeout(JqError):
    pass


class JqQuarantined(JqError):
    """The definition's sandbox lane is quarantined after repeated timeouts (``sandbox.Lane``).
    ``culprit``: the last expression found to time out on its own, None when none is known."""

    def __init__(self, message: str, culprit: str | None = None) -> None:
        super().__init__(message)
        self.culprit = culprit


def too_many_results(max_outputs: int) -> str:
    return f"query results exceed the allowed number {max_outputs}"


# ---------------------------------------------------------------- compiled-program cache


class ProgramCache:
    """LRU of compiled libjq programs keyed by program text. Thread-safe.

    jq.py compiled programs are safe to run from several threads (each run gets its own state).
    Compile errors are cached as well, so a broken definition costs one compile, not one per pod.
    """

    def __init__(self, maxsize: int = 4096) -> None:
        self.maxsize = maxsize
        self.enabled = True
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._items: OrderedDict[str, Any] = OrderedDict()

    def get(self, text: str) -> Any:
        if self.enabled:
            with self._lock:
                item = self._items.get(text)
                if item is not None:
                    self._items.move_to_end(text)
                    self.hits += 1
                    if isinstance(item, JqCompileError):
                        raise item
                    return item
                self.misses += 1
        item = _compile(text)
        if self.enabled:
            with self._lock:
                self._items[text] = item
                if len(self._items) > self.maxsize:
                    self._items.popitem(last=False)
        if isinstance(item, JqCompileError):
            raise item
        return item

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.hits = self.misses = 0


def _compile(text: str) -> Any:
    try:
        return jq.compile(text)
    except ValueError as e:
        return JqCompileError(_clean_compile_error(str(e)))


def _clean_compile_error(msg: str) -> str:
    """libjq prints a caret diagram; keep the first line (it has line/column)."""
    first = msg.strip().splitlines()[0] if msg.strip() else msg
    return first.removeprefix("jq: error: ").strip()


PROGRAMS = ProgramCache()


def compile_error(text: str) -> str | None:
    """libjq's compile error for ``text``, or None if it compiles (cached)."""
    try:
        PROGRAMS.get(text)
    except JqCompileError as e:
        return str(e)
    return None


# ---------------------------------------------------------------- object serialization


# orjson prints every integral float below 1e16 as "<digits>.0" followed by a delimiter (larger
# ones in exponent form, and those are left alone). A match — possibly inside a string — only costs
# the exact pass; no match proves there is nothing to normalize. ~60x cheaper than a digit regex.
_MAYBE_INTEGRAL_FLOAT = re.compile(r"\.0(?:[,}\]]|$)")


def serialize(obj: Any) -> str:
    """JSON text for jq: sorted keys (gojq iteration order), integral floats as ints."""
    try:
        text = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(normalize_numbers(obj), sort_keys=True, default=str)
    if _MAYBE_INTEGRAL_FLOAT.search(text) is None:
        return text
    norm = normalize_numbers(obj)
    if norm is obj:
        return text
    return orjson.dumps(norm, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()


def object_key(obj: Any) -> tuple[str, str] | None:
    """(uid, resourceVersion) when both are present: the cache key of an object version.

    Objects with the same uid and resourceVersion are assumed identical (the Kubernetes
    contract); callers that edit an object in place must change or drop its resourceVersion.
    """
    if not isinstance(obj, dict):
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return None
    uid, rv = meta.get("uid"), meta.get("resourceVersion")
    if uid and rv:
        return (str(uid), str(rv))
    return None


def project(obj: Any, fields: frozenset[str] | None) -> Any:
    """Only the top-level ``fields`` of ``obj`` (all of it when ``fields`` is None)."""
    if fields is None or not isinstance(obj, dict):
        return obj
    return {k: obj[k] for k in sorted(fields) if k in obj}


class ObjectTexts:
    """Bounded LRU: (object version, projection) → serialized text. Without uid/resourceVersion
    the object is serialized on each call and keyed by a digest of its text."""

    def __init__(self, maxsize: int = 2048) -> None:
        self.maxsize = maxsize
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, ...], str] = OrderedDict()

    def get(self, obj: Any, fields: frozenset[str] | None = None) -> tuple[tuple[str, ...], str]:
        version = object_key(obj)
        proj = "*" if fields is None or not isinstance(obj, dict) else ",".join(sorted(fields))
        if version is not None:
            key: tuple[str, ...] = (*version, proj)
            with self._lock:
                text = self._items.get(key)
                if text is not None:
                    self._items.move_to_end(key)
                    return key, text
        text = serialize(project(obj, fields))
        if version is None:
            return ("#", hashlib.blake2b(text.encode(), digest_size=16).hexdigest()), text
        with self._lock:
            self._items[key] = text
            if len(self._items) > self.maxsize:
                self._items.popitem(last=False)
        return key, text

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


OBJECT_TEXTS = ObjectTexts()


# ---------------------------------------------------------------- runners


class Runner(Protocol):
    """Runs one jq program on one JSON text and returns at most ``max_outputs`` outputs.

    Raises ``JqCompileError``, ``JqError`` (runtime error or too many outputs), ``JqTimeout``.
    """

    def run(self, program: str, input_text: str, max_outputs: int, timeout_s: float | None) -> list[Any]: ...


def run_bounded(prog: Any, input_text: str, max_outputs: int) -> list[Any]:
    """Iterate lazily so a huge generator is stopped at ``max_outputs``."""
    out: list[Any] = []
    try:
        for value in prog.input_text(input_text):
            out.append(value)
            if len(out) >= max_outputs:
                raise JqError(too_many_results(max_outputs))
    except ValueError as e:
        raise JqError(str(e)) from None
    return out


class InProcessRunner:
    """Runs libjq in this process. ``timeout_s`` cannot be enforced here (libjq is not
    interruptible): trusted definitions only, validated to contain no unbounded construct."""

    def run(
        self, program: str, input_text: str, max_outputs: int, timeout_s: float | None = None
    ) -> list[Any]:
        return run_bounded(PROGRAMS.get(program), input_text, max_outputs)


IN_PROCESS = InProcessRunner()


# ---------------------------------------------------------------- fused evaluation


@dataclass(frozen=True)
class Outcome:
    """All outputs of one expression on one object, or why there are none. ``blame``: the
    expression that caused the error when it is another one (a timeout of a fused batch)."""

    values: tuple[Any, ...] = ()
    error: str | None = None
    blame: str | None = None
    quarantined: bool = False  # ``error`` is the lane's quarantine (``blame``: the expression that caused it)

    @property
    def ok(self) -> bool:
        return self.error is None


def fused_program(exprs: Sequence[str], max_outputs: int) -> str:
    """One program evaluating every expression; newlines keep ``#`` comments from eating the
    wrapper. Safe to splice: each expression compiled standalone first, and module directives
    (the only top-level-only syntax) do not compile inside parentheses."""
    parts = [f"(try ([limit({max_outputs}; (\n{e}\n))] | [true, .]) catch [false, .])" for e in exprs]
    return "[\n" + ",\n".join(parts) + "\n]"


def _outcome_from_pair(pair: Any, max_outputs: int) -> Outcome:
    if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], bool)):
        return Outcome(error=f"unexpected fused result {pair!r}")
    ok, payload = pair
    if not ok:
        msg = payload if isinstance(payload, str) else json.dumps(payload)
        return Outcome(error=msg)
    if not isinstance(payload, list):
        return Outcome(error=f"unexpected fused payload {payload!r}")
    if len(payload) >= max_outputs:
        return Outcome(error=too_many_results(max_outputs))
    return Outcome(values=tuple(payload))


class CompileChecker(Protocol):
    """Compiles expressions somewhere safe and returns libjq's error for each (None: compiles)."""

    def compile_errors(self, exprs: Sequence[str], timeout_s: float | None = ...) -> list[str | None]: ...


class _CompileResults:
    """Text digest → compile error (or None). Compile results depend only on the text and libjq,
    so one cache serves every runner; only *computing* a result must happen where it is safe.
    Keyed by digest so long hostile expressions do not stay in memory."""

    def __init__(self, maxsize: int = 8192) -> None:
        self.maxsize = maxsize
        self._lock = threading.Lock()
        self._items: OrderedDict[bytes, str | None] = OrderedDict()

    @staticmethod
    def _key(text: str) -> bytes:
        return hashlib.blake2b(text.encode(), digest_size=16).digest()

    def lookup(self, exprs: Sequence[str], checker: Any, timeout_s: float | None) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        missing: list[str] = []
        with self._lock:
            for e in exprs:
                k = self._key(e)
                if k in self._items:
                    self._items.move_to_end(k)
                    out[e] = self._items[k]
                else:
                    missing.append(e)
        if missing:
            if checker is None:
                found = [compile_error(e) for e in missing]
            else:
                found = checker.compile_errors(missing, timeout_s)
            with self._lock:
                for e, err in zip(missing, found, strict=True):
                    out[e] = self._items[self._key(e)] = (err[:2000] if err else err)
                while len(self._items) > self.maxsize:
                    self._items.popitem(last=False)
        return out

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


COMPILE_RESULTS = _CompileResults()


def compile_errors(
    exprs: Sequence[str], checker: CompileChecker | None = None, timeout_s: float | None = 10.0
) -> dict[str, str | None]:
    """libjq's compile error per expression, computed by ``checker`` (a sandbox) or, without
    one, in this process (trusted text only). Raises ``JqError`` when the checker fails."""
    return COMPILE_RESULTS.lookup(list(dict.fromkeys(exprs)), checker, timeout_s)


def _compilable(
    distinct: list[str], runner: Runner, timeout_s: float | None
) -> tuple[dict[str, Outcome], list[str]]:
    """(the compile error outcome of each expression that does not compile, the ones that do, in order),
    compiled by the runner when it can. Raises ``JqError`` when the compile check itself fails."""
    checker = cast(CompileChecker, runner) if hasattr(runner, "compile_errors") else None
    errors = compile_errors(distinct, checker, timeout_s)
    failed: dict[str, Outcome] = {}
    good: list[str] = []
    for text in distinct:
        err = errors.get(text)
        if err is not None:
            failed[text] = Outcome(error=f"failed to compile JQ expression: {err}")
        else:
            good.append(text)
    return failed, good


def evaluate_many(
    exprs: Iterable[str],
    input_text: str,
    *,
    runner: Runner = IN_PROCESS,
    max_outputs: int = DEFAULT_MAX_OUTPUTS,
    timeout_s: float | None = None,
) -> dict[str, Outcome]:
    """Evaluate distinct expressions on one input, in one jq run when possible.

    Expressions that do not compile get their compile error (compiled by the runner when it
    can: a sandbox never lets libjq compile untrusted text in this process). If the fused
    program itself fails (it should not), each expression is run alone. When the fused run
    times out, the expressions are run one by one until the one that times out is found: it
    gets the timeout, the rest that did not run are blamed on it.
    """
    distinct = list(dict.fromkeys(exprs))
    try:
        results, good = _compilable(distinct, runner, timeout_s)
    except JqQuarantined as exc:
        return {expr: _quarantined(exc) for expr in distinct}
    except JqError as exc:
        return {expr: Outcome(error=str(exc)) for expr in distinct}
    if not good:
        return results
    if len(good) > 1:
        try:
            out = runner.run(fused_program(good, max_outputs), input_text, 2, timeout_s)
        except JqQuarantined as exc:
            return {**results, **{expr: _quarantined(exc) for expr in good}}
        except JqTimeout:
            out = None
        except JqError:
            out = []
        if out is not None and len(out) == 1 and isinstance(out[0], list) and len(out[0]) == len(good):
            for expr, pair in zip(good, out[0], strict=True):
                results[expr] = _outcome_from_pair(pair, max_outputs)
            return results
    culprit: str | None = None
    for expr in good:
        if culprit is not None:
            results[expr] = Outcome(
                error=f"not evaluated: expression '{culprit}' timed out first", blame=culprit
            )
            continue
        try:
            results[expr] = Outcome(values=tuple(runner.run(expr, input_text, max_outputs, timeout_s)))
        except JqQuarantined as e:
            results[expr] = _quarantined(e)
        except JqTimeout as e:
            culprit = expr
            results[expr] = Outcome(error=str(e))
            note = getattr(runner, "note_timeout", None)  # a sandbox lane names it when it quarantines
            if note is not None:
                note(expr)
        except JqError as e:
            results[expr] = Outcome(error=str(e))
    return results


def _quarantined(exc: JqQuarantined) -> Outcome:
    return Outcome(error=str(exc), blame=exc.culprit, quarantined=True)


# Several objects in one run: the sandbox's cost is mostly the round trip to its worker process
# (~0.2-0.5 ms), so deciding a pass's pods one run each pays it per pod.
EACH_MAX_INPUTS = 64
EACH_MAX_BYTES = 1 << 20


def evaluate_groups(
    groups: Sequence[tuple[Iterable[str], Sequence[str]]],
    *,
    runner: Runner = IN_PROCESS,
    max_outputs: int = DEFAULT_MAX_OUTPUTS,
    timeout_s: float | None = None,
) -> list[list[dict[str, Outcome]]] | None:
    """What :func:`evaluate_many` gives for each input of each (expressions, inputs) group — a workload's
    pods with the pod expressions and its root object with the root expressions — from ONE jq run; None
    when one run cannot answer for all (no expression of a group compiles, the run fails or times out):
    the caller then evaluates each input alone, so a definition that is slow on some input is still
    traced to that input and expression.

    The program is ``[(.[0] | [.[] | [FUSED_0]]), (.[1] | [.[] | [FUSED_1]]), ...]`` over the JSON array
    of the groups' input arrays: ``FUSED_i`` is the program :func:`evaluate_many` runs on one input, so
    each expression keeps its outputs and its error (a lone expression, which :func:`evaluate_many` runs
    unfused, gives the same outputs and error message: jq's message for a non-string error value is its
    JSON text either way — tested)."""
    if not any(texts for _, texts in groups):
        return [[] for _ in groups]
    parts: list[str] = []
    plan: list[tuple[dict[str, Outcome], list[str], int]] = []  # per group: failed, good, inputs
    for exprs, texts in groups:
        if not texts:
            plan.append(({}, [], 0))
            continue
        try:
            failed, good = _compilable(list(dict.fromkeys(exprs)), runner, timeout_s)
        except JqError:
            return None
        if not good:
            return None
        parts.append(f"(.[{len(parts)}] | [.[] | [\n" + fused_program(good, max_outputs) + "\n]])")
        plan.append((failed, good, len(texts)))
    program = "[" + ",\n".join(parts) + "]"
    data = "[" + ",".join("[" + ",".join(texts) + "]" for _, texts in groups if texts) + "]"
    try:
        out = runner.run(program, data, 2, timeout_s)
    except JqError:
        return None
    if len(out) != 1 or not isinstance(out[0], list) or len(out[0]) != len(parts):
        return None
    answers = iter(out[0])
    results: list[list[dict[str, Outcome]]] = []
    for failed, good, n in plan:
        if not n:
            results.append([])
            continue
        answer = next(answers)
        if not isinstance(answer, list) or len(answer) != n:
            return None
        group: list[dict[str, Outcome]] = []
        for each in answer:
            if not (isinstance(each, list) and len(each) == 1 and isinstance(each[0], list) and len(each[0]) == len(good)):
                return None
            res = dict(failed)
            for expr, pair in zip(good, each[0], strict=True):
                res[expr] = _outcome_from_pair(pair, max_outputs)
            group.append(res)
        results.append(group)
    return results
