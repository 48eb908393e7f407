"""Peak RSS of the admission webhook server while a hostile client POSTs a huge body.

The webhook server (``grouper.webhook.server.WebhookServer``, the grouper's own, answering nothing: its
decider returns None) runs in a child process on 127.0.0.1 with throwaway certificates; the client sends
a 300 MB body, once declared (Content-Length) and once chunked, streaming it until the server answers or
closes. Reported: the child's RSS before, its peak (VmHWM) after each body, the answer, the bytes the client
got to send. A client with no certificate is the attacker, so the server runs with
``allow_unauthenticated`` (with ``--webhook-client-ca`` it would not get past the TLS handshake).

    .venv/bin/python benchmarks/bench_webhook_body.py [--mb 300] [--src DIR] [--out FILE]

``--src``: import ``grouper`` from another tree (e.g. ``mkdir /tmp/old; git archive 48015e9 grouper | tar -x
-C /tmp/old``) to measure the server before a change on the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from devtools.cluster import pki  # noqa: E402

CHILD = """
import asyncio, inspect, sys
from grouper.webhook.admission import Admission
from grouper.webhook.server import WebhookServer

async def nothing(pod):
    return None

async def main():
    kw = {}
    if "allow_unauthenticated" in inspect.signature(WebhookServer).parameters:
        kw["allow_unauthenticated"] = True
    srv = WebhookServer(Admission(nothing), "127.0.0.1:0", sys.argv[1], sys.argv[2], **kw)
    await srv.start()
    print(srv.port, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""
CHUNK = 256 * 1024


def status_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def hostile_post(port: int, ca: Path, total: int, chunked: bool) -> tuple[str, int]:
    ctx = ssl.create_default_context(cafile=str(ca))
    sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=120), server_hostname="127.0.0.1")
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}"
    sent, answer = 0, ""
    try:
        sock.sendall(f"POST /mutate-pods HTTP/1.1\r\nHost: x\r\n{framing}\r\n\r\n".encode())
        piece = b"x" * CHUNK
        frame = f"{CHUNK:x}\r\n".encode() + piece + b"\r\n" if chunked else piece
        while sent < total:
            sock.sendall(frame)
            sent += CHUNK
        if chunked:
            sock.sendall(b"0\r\n\r\n")
    except (ConnectionError, ssl.SSLError, TimeoutError) as e:
        answer = f"closed while sending ({type(e).__name__})"
    try:
        data = sock.recv(4096)
        answer = data.split(b"\r\n", 1)[0].decode() or answer or "closed"
    except (ConnectionError, ssl.SSLError, TimeoutError) as e:
        answer = answer or f"closed ({type(e).__name__})"
    sock.close()
    return answer, sent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=300)
    ap.add_argument("--src", default=str(REPO), help="checkout whose grouper package is measured")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "webhook_body.json"))
    args = ap.parse_args()
    total = args.mb * 1024 * 1024
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        ca = pki.generate(Path(tmp) / "pki")
        cert, key = pki.issue_serving_cert(ca, Path(tmp) / "issued", "webhook")
        for chunked in (False, True):
            env = {**os.environ, "PYTHONPATH": args.src}
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(cert), str(key)], stdout=subprocess.PIPE, env=env, text=True, cwd=tmp
            )
            try:
                assert child.stdout is not None
                port = int(child.stdout.readline())
                before = status_kib(child.pid)
                t0 = time.monotonic()
                answer, sent = hostile_post(port, ca.ca_cert, total, chunked)
                after = status_kib(child.pid)
                rows.append({
                    "framing": "chunked" if chunked else "content-length", "body_mb": args.mb,
                    "rss_before_mb": round(before["VmRSS"] / 1024, 1), "peak_rss_mb": round(after["VmHWM"] / 1024, 1),
                    "answer": answer, "client_sent_mb": round(sent / 2**20, 1),
                    "seconds": round(time.monotonic() - t0, 2),
                })  # fmt: skip
            finally:
                child.terminate()
                child.wait(10)
    for r in rows:
        print(
            f"{r['framing']:>14}: RSS {r['rss_before_mb']} MB before, peak {r['peak_rss_mb']} MB; "
            f"answer {r['answer']!r}; client sent {r['client_sent_mb']} of {r['body_mb']} MB in {r['seconds']} s"
        )
    commit = subprocess.run(["git", "-C", args.src, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    out = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit.strip(), "src": args.src,
        "rows": rows,
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
