"""Stand-alone jq worker process for ``grouper.karta.sandbox`` (imports only the stdlib and jq).

Started as ``python -I _jqworker.py <memory-limit-bytes>`` with an empty environment. Protocol:
frames of a 4-byte big-endian length and a JSON body, one request then one response.
Request ``{"p": program, "i": input JSON text, "m": max outputs}``; response ``{"ok": [outputs]}``
or ``{"err": message, "kind": "compile" | "run" | "limit" | "memory"}``.
"""

from __future__ import annotations

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


def main() -> None:
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
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
            prog = programs.get(req["p"])
            if prog is None:
                try:
                    prog = jq.compile(req["p"])
                except ValueError as e:
                    raise LookupError(str(e)) from None
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
        out.write(struct.pack(">I", len(data)) + data)
        out.flush()


if __name__ == "__main__":
    main()
