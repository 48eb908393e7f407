"""Optional bearer-token authentication for the HTTP API (``--http-auth-token-file``).

The token file is re-read when its modification time changes, so a rotated Secret takes effect without a
restart. Tokens are compared in constant time. Which paths stay open (the probes, so kubelet reaches them) is
:data:`grouper.api.permissions.ROUTES`'s decision.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path


class TokenFileError(RuntimeError):
    """The token file is missing, unreadable or empty."""


class BearerAuth:
    def __init__(self, token_file: str | Path) -> None:
        self.path = Path(token_file)
        self._mtime: float | None = None
        self._token = b""
        self._load()  # fail at start-up, not on the first request

    def _load(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime
            if mtime == self._mtime:
                return
            token = self.path.read_text().strip()
        except OSError as e:
            raise TokenFileError(f"cannot read HTTP auth token file {self.path}: {e}") from e
        if not token:
            raise TokenFileError(f"HTTP auth token file {self.path} is empty")
        self._token, self._mtime = token.encode(), mtime

    def token(self) -> bytes:
        """The current token; keeps the last good one when the file turns unreadable or empty."""
        try:
            self._load()
        except TokenFileError:
            if not self._token:
                raise
        return self._token

    def check(self, authorization: str | None) -> bool:
        """True when the ``Authorization`` header carries the token (``Bearer <token>``)."""
        if not authorization:
            return False
        scheme, _, presented = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(presented.strip().encode(), self.token())


__all__ = ["BearerAuth", "TokenFileError"]
