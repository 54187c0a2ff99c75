"""ServerConfig: the server's settings (no web library imported, so the CLI can read them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgespec.errors import EdgespecError


@dataclass(frozen=True)
class ServerConfig:
    """The server's settings; `edgespec serve` mirrors each field with a flag."""

    model_id: str = "edgespec"  # the name /v1/models lists and requests may give
    host: str = "127.0.0.1"  # the bound address: Host headers may name it
    allow_hosts: tuple[str, ...] = ()  # more names a Host header may give (a LAN name)
    allow_origins: tuple[str, ...] = ()  # web origins that may call the API (CORS)
    api_key: str | None = None  # required as "Authorization: Bearer KEY" on /v1 routes
    max_queue: int = 8  # requests that may wait while one generates
    max_body_bytes: int = 1 << 20  # larger request bodies get 413
    request_timeout_s: float = 30.0  # a request not whole this long after it began: 408, closed

    def __post_init__(self) -> None:
        if self.max_queue < 0:
            raise EdgespecError(f"--max-queue must be >= 0, got {self.max_queue}")
        if self.max_body_bytes < 1:
            raise EdgespecError(f"--max-body-bytes must be >= 1, got {self.max_body_bytes}")
        if not 0 < self.request_timeout_s < math.inf:
            raise EdgespecError(
                f"--request-timeout must be a number of seconds > 0, got {self.request_timeout_s}"
            )
        if self.api_key is not None and not self.api_key:
            raise EdgespecError("--api-key must not be empty")
