"""Serve a renewed certificate without a restart.

cert-manager renews the webhook's serving certificate before it expires and the kubelet then swaps the
mounted Secret's files; a server that read them once at start keeps presenting the old certificate until it
expires, and from then on every admission fails (``failurePolicy: Ignore``: pods admitted unchanged, which
the upstream backend cannot mend). So, as controller-runtime's certwatcher does, the files are read again
every :data:`RELOAD_INTERVAL_SECONDS`, and a changed pair is loaded into the live TLS context: the next
handshakes present it, connections already open keep theirs.

A pair that does not load (the certificate renewed but its key not yet, a file half written) is not
applied: it is first loaded into a scratch context, because a failed load into the live one would leave it
with the new certificate and the old key, and no handshake would succeed. The old pair stays in use, and the
failure is logged once per content until the files are whole again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import tempfile

log = logging.getLogger(__name__)

# How often the files are read (controller-runtime's certwatcher polls every 10 s too): a renewal reaches the
# pod's volume a minute or so after the Secret changed, well before the old certificate expires.
RELOAD_INTERVAL_SECONDS = 10.0


class CertificateReloader:
    """Loads ``cert_file`` / ``key_file`` into ``context`` again when their contents change."""

    def __init__(self, context: ssl.SSLContext, cert_file: str, key_file: str, *,
                 interval: float = RELOAD_INTERVAL_SECONDS) -> None:
        self.context, self.cert_file, self.key_file, self.interval = context, cert_file, key_file, interval
        self.reloads = 0
        self._loaded = self._read()  # what the context was made from
        self._refused: tuple[bytes, bytes] | None = None

    def _read(self) -> tuple[bytes, bytes] | None:
        try:
            with open(self.cert_file, "rb") as c, open(self.key_file, "rb") as k:
                return c.read(), k.read()
        except OSError:
            return None  # between the kubelet's swaps, or gone: the next look decides

    def check(self) -> bool:
        """Load the files when they changed and make a valid pair; whether the context now has new ones."""
        pair = self._read()
        if pair is None or pair == self._loaded or pair == self._refused:
            return False
        # Both contexts load the bytes read once (a private temporary copy, in the chart's writable /tmp): the
        # pair checked is the pair applied.
        try:
            with tempfile.TemporaryDirectory(prefix="webhook-cert-") as d:
                cert, key = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
                for path, data in ((cert, pair[0]), (key, pair[1])):
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
                self.context.load_cert_chain(cert, key)  # the same bytes, just loaded whole above
        except (ssl.SSLError, OSError) as e:
            self._refused = pair
            log.warning("webhook serving certificate %s / %s changed but does not load (%s); still serving the "
                        "one loaded before", self.cert_file, self.key_file, e)
            return False
        self._loaded, self._refused = pair, None
        self.reloads += 1
        log.info("webhook serving certificate reloaded from %s", self.cert_file)
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.check()
            except Exception:  # never end the polling: the next renewal must still be picked up
                log.exception("webhook serving certificate: looking for a renewal failed")


__all__ = ["RELOAD_INTERVAL_SECONDS", "CertificateReloader"]
