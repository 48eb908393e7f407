"""Stand-alone jq worker process for ``grouper.karta.sandbox`` (imports only the stdlib and jq).

Started as ``python -I _jqworker.py <memory-limit-bytes> <max-response-bytes>`` with an empty
environment. Protocol: frames of a 4-byte big-endian length and a JSON body, one request then one
response. Requests:

* run ``{"p": program, "i": input JSON text, "m": max outputs}`` → ``{"ok": [outputs]}`` or
  ``{"err": message, "kind": "compile" | "run" | "limit" | "memory"}``;
* compile check ``{"c": [program, ...]}`` → ``{"ok": [null | compile error, ...]}`` (libjq folds
  constants while compiling, so compiling untrusted text is as dangerous as running it).

A response larger than the byte cap is replaced by a ``limit`` error. The worker volunteers as
the first victim of the kernel's OOM killer (``oom_score_adj``), so a container that runs out of
memory loses a worker, not the controller.
"""

from __future__ import annotations

import contextlib
import json
import resource
import struct
import sys
from collections import OrderedDict
from typing import Any


def _read_exact(stream: Any, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _first_line(msg: str) -> str:
    text = msg.strip()
    first = text.splitlines()[0] if text else msg
    return first.removeprefix("jq: error: ").strip()


def main() -> None:
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    max_response = int(sys.argv[2]) if len(sys.argv) > 2 else 64 << 20
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
    import jq

    programs: OrderedDict[str, Any] = OrderedDict()
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        header = _read_exact(inp, 4)
        if header is None:
            return
        body = _read_exact(inp, struct.unpack(">I", header)[0])
        if body is None:
            return
        req = json.loads(body)
        resp: dict[str, Any]
        try:
            if "c" in req:
                errors: list[str | None] = []
                for text in req["c"]:
                    try:
                        jq.compile(text)
                        errors.append(None)
                    except ValueError as e:
                        errors.append(_first_line(str(e)))
                resp = {"ok": errors}
            else:
                prog = programs.get(req["p"])
                if prog is None:
                    try:
                        prog = jq.compile(req["p"])
                    except ValueError as e:
                        raise LookupError(_first_line(str(e))) from None
                    programs[req["p"]] = prog
                    if len(programs) > 256:
                        programs.popitem(last=False)
                values: list[Any] = []
                max_outputs = int(req["m"])
                for v in prog.input_text(req["i"]):
                    values.append(v)
                    if len(values) >= max_outputs:
                        raise OverflowError(f"query results exceed the allowed number {max_outputs}")
                resp = {"ok": values}
        except LookupError as e:
            resp = {"err": str(e), "kind": "compile"}
        except OverflowError as e:
            resp = {"err": str(e), "kind": "limit"}
        except MemoryError:
            resp = {"err": "memory limit exceeded", "kind": "memory"}
        except ValueError as e:
            resp = {"err": str(e), "kind": "run"}
        try:
            data = json.dumps(resp).encode()
        except (TypeError, ValueError) as e:
            data = json.dumps({"err": f"unencodable result: {e}", "kind": "run"}).encode()
        except MemoryError:
            data = b'{"err": "memory limit exceeded", "kind": "memory"}'
        if len(data) > max_response:
            data = json.dumps(
                {"err": f"result is larger than the limit of {max_response} bytes", "kind": "limit"}
            ).encode()
        out.write(struct.pack(">I", len(data)) + data)
        out.flush()


if __name__ == "__main__":
    main()
