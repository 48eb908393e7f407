"""The webhook server's bounds and client authentication (grouper.webhook.server, grouper.webhook.limits),
without a cluster: the ASGI app driven directly (counting the body bytes it pulls), and the real TLS server
on 127.0.0.1 with certificates made by devtools.cluster.pki."""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube import wait_until

from devtools.cluster import pki
from grouper.runtime.service import Service
from grouper.runtime.settings import RunSettings
from grouper.webhook.admission import Admission
from grouper.webhook.limits import MAX_BODY_BYTES, MAX_DEPTH, TooDeep, check_depth
from grouper.webhook.server import MUTATE_PATH, WebhookServer, check_client_auth, create_app

HOSTILE = 300 * 1024 * 1024  # the body of the hostile test: 300 MB
CHUNK = 64 * 1024


async def not_ours(pod: dict[str, Any]) -> None:
    return None


def review_bytes() -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {"a": "[[[{{"}}}
    return json.dumps({"request": {"uid": "r1", "operation": "CREATE", "namespace": "ns", "object": pod}}).encode()


class Body:
    """An ASGI ``receive`` that offers ``total`` bytes in chunks and counts what the app pulled."""

    def __init__(self, total: int, data: bytes | None = None) -> None:
        self.total, self.data, self.pulled = total, data, 0

    async def __call__(self) -> dict[str, Any]:
        if self.data is not None:
            self.pulled, data, self.data = len(self.data), self.data, None
            return {"type": "http.request", "body": data, "more_body": False}
        n = min(CHUNK, self.total - self.pulled)
        self.pulled += n
        return {"type": "http.request", "body": b"x" * n, "more_body": self.pulled < self.total}


def call(body: Body, headers: dict[str, str]) -> tuple[int, dict[str, str], dict[str, Any]]:
    app = create_app(Admission(not_ours))
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "https",
        "path": MUTATE_PATH, "raw_path": MUTATE_PATH.encode(), "query_string": b"", "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 443),
    }  # fmt: skip
    asyncio.run(app(scope, body, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    resp_headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], resp_headers, json.loads(payload)


def test_a_declared_oversize_body_is_refused_before_a_byte_is_read() -> None:
    body = Body(HOSTILE)
    status, headers, answer = call(body, {"content-length": str(HOSTILE)})
    assert status == 413 and headers["connection"] == "close"
    assert f"limit of {MAX_BODY_BYTES} bytes" in answer["error"]
    assert body.pulled == 0


def test_an_undeclared_oversize_body_is_read_only_up_to_the_limit() -> None:
    body = Body(HOSTILE)  # chunked: no Content-Length to check
    status, headers, _ = call(body, {})
    assert status == 413 and headers["connection"] == "close"
    print(f"\n[measure] chunked {HOSTILE} B body: {body.pulled} B read before the 413")
    assert MAX_BODY_BYTES < body.pulled <= MAX_BODY_BYTES + CHUNK


def test_a_review_under_the_limit_is_answered() -> None:
    data = review_bytes()
    status, _, answer = call(Body(len(data), data), {"content-length": str(len(data))})
    assert status == 200 and answer["response"] == {"uid": "r1", "allowed": True}


def test_deep_nesting_is_a_clear_400_not_a_500() -> None:
    data = b"[" * 50_000 + b"]" * 50_000
    status, _, answer = call(Body(len(data), data), {"content-length": str(len(data))})
    assert status == 400
    assert f"nested deeper than the webhook's limit of {MAX_DEPTH} levels" in answer["error"]


def test_malformed_json_is_a_400() -> None:
    for data in (b"{", b"\xff\xfe[", b'"unterminated'):
        status, _, answer = call(Body(len(data), data), {"content-length": str(len(data))})
        assert status == 400 and answer["error"].startswith("request body: ")


def test_depth_scan_counts_brackets_outside_strings_only() -> None:
    check_depth(review_bytes())
    check_depth(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    check_depth(json.dumps({"s": "[" * 1000, "e": 'x\\"[[[' * 500}).encode())  # inside strings: ignored
    with pytest.raises(TooDeep):
        check_depth(b"[" * (MAX_DEPTH + 1))
    with pytest.raises(TooDeep):
        check_depth(b'{"a":' * (MAX_DEPTH + 1))


def test_without_a_client_ca_the_webhook_must_be_allowed_to_serve_anyone() -> None:
    with pytest.raises(ValueError, match="--webhook-client-ca"):
        check_client_auth("", False)
    check_client_auth("", True)
    check_client_auth("/ca.crt", False)


def test_the_grouper_refuses_to_start_a_webhook_nobody_authenticates() -> None:
    """Before it connects anywhere or fills a cache: the error names both flags."""
    settings = RunSettings(webhook_bind_address="127.0.0.1:0", webhook_cert_file="c", webhook_key_file="k")
    with pytest.raises(ValueError, match=r"--webhook-client-ca .* or --webhook-allow-unauthenticated=true"):
        asyncio.run(Service(settings).start())


# ---------------------------------------------------------------- the real TLS server


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    ca = pki.generate(d / "cluster")
    serving = pki.issue_serving_cert(ca, d / "issued", "webhook")
    other = pki.issue_serving_cert(ca, d / "issued", "someone")  # signed by the cluster CA, not the client CA
    renewed = pki.issue_serving_cert(ca, d / "issued", "webhook-renewed")  # the same name, a new key
    client_ca, client_cert, client_key = pki.webhook_client(d / "client")
    return {
        "ca": ca.ca_cert, "cert": serving[0], "key": serving[1], "client_ca": client_ca,
        "client_cert": client_cert, "client_key": client_key, "other_cert": other[0], "other_key": other[1],
        "renewed_cert": renewed[0], "renewed_key": renewed[1],
    }  # fmt: skip


@contextlib.contextmanager
def serving(srv: WebhookServer) -> Iterator[asyncio.AbstractEventLoop]:
    """``srv`` started and served by its own event loop in a thread; stopped at the end."""
    loop = asyncio.new_event_loop()
    loop.run_until_complete(srv.start())
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        yield loop
    finally:
        asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
        loop.close()


@pytest.fixture
def server(certs: dict[str, Path]) -> Iterator[tuple[int, asyncio.AbstractEventLoop]]:
    srv = WebhookServer(
        Admission(not_ours), "127.0.0.1:0", str(certs["cert"]), str(certs["key"]), client_ca=str(certs["client_ca"])
    )
    with serving(srv) as loop:
        yield srv.port, loop


def tls(port: int, certs: dict[str, Path], client: str | None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(certs["ca"]))
    if client is not None:
        ctx.load_cert_chain(str(certs[f"{client}_cert"]), str(certs[f"{client}_key"]))
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def post(sock: ssl.SSLSocket, body: bytes) -> tuple[int, bytes]:
    head = f"POST {MUTATE_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return response(sock)


def response(sock: ssl.SSLSocket, data: bytes = b"") -> tuple[int, bytes]:
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed without an answer (got {data!r})")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")) if k.lower() == b"content-length")
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split(b" ", 2)[1]), data[: len(head) + 4] + body


def answer_so_far(sock: ssl.SSLSocket) -> bytes | None:
    """What the server answered so far without waiting: None when nothing (a TLS 1.3 session ticket makes
    the socket readable with no answer in it), b"" when it closed."""
    if not sock.pending() and not select.select([sock], [], [], 0)[0]:
        return None
    sock.setblocking(False)
    try:
        return sock.recv(65536)
    except (ssl.SSLWantReadError, BlockingIOError):
        return None
    finally:
        sock.settimeout(30)


def _received(sock: ssl.SSLSocket) -> bytes:
    """What the server sent before it closed (b"" when nothing can be read any more)."""
    try:
        sock.settimeout(5)
        return sock.recv(65536)
    except (ssl.SSLError, OSError):
        return b""


def test_the_api_servers_client_certificate_is_accepted(
    server: tuple[int, asyncio.AbstractEventLoop], certs: dict[str, Path]
) -> None:
    with tls(server[0], certs, "client") as s:
        status, data = post(s, review_bytes())
    assert status == 200 and b'"uid":"r1"' in data


@pytest.mark.parametrize("client", [None, "other"], ids=["no-certificate", "cluster-ca-certificate"])
def test_a_client_without_the_webhook_client_certificate_is_refused(
    server: tuple[int, asyncio.AbstractEventLoop], certs: dict[str, Path], client: str | None
) -> None:
    # TLS 1.3: the client's handshake ends before the server checked its certificate; the refusal (an
    # alert, then the close) arrives at the first read, before any HTTP answer
    with pytest.raises((ssl.SSLError, ConnectionError)), tls(server[0], certs, client) as s:
        post(s, review_bytes())


def test_over_tls_a_declared_300_mb_body_is_answered_413_unsent(
    server: tuple[int, asyncio.AbstractEventLoop], certs: dict[str, Path]
) -> None:
    with tls(server[0], certs, "client") as s:
        s.sendall(f"POST {MUTATE_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {HOSTILE}\r\n\r\n".encode())
        status, data = response(s)  # not one byte of the body was sent
    assert status == 413 and b"connection: close" in data.lower()


def test_over_tls_a_chunked_300_mb_body_is_cut_at_the_limit(
    server: tuple[int, asyncio.AbstractEventLoop], certs: dict[str, Path]
) -> None:
    """The client sends chunks until the answer is there to read: what it got to send is the limit plus
    what the sockets buffer while the server answers, never the 300 MB."""
    sent = 0
    with tls(server[0], certs, "client") as s:
        s.sendall(f"POST {MUTATE_PATH} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        chunk = f"{CHUNK:x}\r\n".encode() + b"x" * CHUNK + b"\r\n"
        got: bytes | None = None
        while sent < HOSTILE and got is None:
            try:
                s.sendall(chunk)
            except (ssl.SSLError, OSError):  # it answered and closed while this chunk was on its way (a busy
                got = _received(s)            # box): the answer is what it sent before closing
                break
            sent += CHUNK
            got = answer_so_far(s)
    # the status line is enough: the rest of the answer may wait for the server's TLS close (asyncio's
    # close reads and drops what the client still sends, up to its 30 s shutdown timeout)
    assert got, "the server closed without an answer"
    status = int(got.split(b" ", 2)[1])
    print(f"\n[measure] chunked over TLS: {sent} B sent of {HOSTILE} before the answer")
    assert status == 413
    assert sent < 64 * 1024 * 1024


# ---------------------------------------------------------------- a renewed certificate


def _mount(directory: Path, version: str, cert: Path, key: Path) -> None:
    """Put a certificate pair in ``directory`` the way the kubelet updates a Secret volume: the files in a new
    directory, then the ``..data`` symlink swapped to it in one rename (``tls.crt`` -> ``..data/tls.crt``)."""
    (directory / version).mkdir()
    (directory / version / "tls.crt").write_bytes(cert.read_bytes())
    (directory / version / "tls.key").write_bytes(key.read_bytes())
    (directory / "..data_tmp").symlink_to(version)
    (directory / "..data_tmp").rename(directory / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")


def _presented(port: int, certs: dict[str, Path]) -> bytes:
    """The certificate a new handshake gets (DER)."""
    with tls(port, certs, "client") as s:
        der = s.getpeercert(binary_form=True)
        assert der is not None
        status, _ = post(s, review_bytes())  # and the handshake serves admissions
        assert status == 200
        return der


def _der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path, certs: dict[str, Path]) -> None:
    """cert-manager renews the certificate and the kubelet swaps the mounted files: the next handshakes
    present the new one (read by the server's own polling), also after the server restarted; a pair that
    does not load (the certificate renewed, its key not yet) is never applied, the old one is served on."""
    mounted = tmp_path / "serving-certs"
    mounted.mkdir()
    _mount(mounted, "v1", certs["cert"], certs["key"])
    srv = WebhookServer(Admission(not_ours), "127.0.0.1:0", str(mounted / "tls.crt"), str(mounted / "tls.key"),
                        client_ca=str(certs["client_ca"]), reload_interval=0.05)

    def presented_soon(expected: Path) -> None:  # by the server's own polling
        wait_until(lambda: _presented(srv.port, certs) == _der(expected), 30, what=f"{expected.name} presented")

    with serving(srv) as loop:
        assert _presented(srv.port, certs) == _der(certs["cert"])
        renewals = [("renewed_cert", "renewed_key"), ("cert", "key"), ("renewed_cert", "renewed_key")]  # and back
        for version, (cert, key) in enumerate(renewals, start=2):
            _mount(mounted, f"v{version}", certs[cert], certs[key])
            presented_soon(certs[cert])
        assert srv.reloader is not None and srv.reloader.reloads == 3

        def on_loop(coro: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

        async def check() -> bool:
            assert srv.reloader is not None
            return srv.reloader.check()

        on_loop(srv.stop())  # its polling stops with it: check() by hand from here
        (mounted / "tls.crt").unlink()  # half renewed: a new certificate beside the old key
        (mounted / "tls.crt").write_bytes(certs["cert"].read_bytes())
        assert on_loop(check()) is False
        on_loop(srv.start())  # the restart keeps the context: the old pair, whole
        assert _presented(srv.port, certs) == _der(certs["renewed_cert"])
        (mounted / "tls.key").unlink()
        (mounted / "tls.key").write_bytes(certs["key"].read_bytes())  # the key follows
        presented_soon(certs["cert"])
        assert srv.reloader.reloads == 4
