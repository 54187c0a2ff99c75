"""edgespec.server: an OpenAI-compatible HTTP server over one SpeculativeDecoder.

    from edgespec import load_decoder
    from edgespec.server import ServerConfig, create_app
    app = create_app(
        load_decoder("target.gguf", "draft.gguf", reuse_cache=True, capture_graphs=True)
    )

Application layer, like edgespec.app: the core never imports it. It needs the `serve` extra
(Starlette, uvicorn, prometheus-client), imported on first use of create_app or
ServerConfig, so the `edgespec` command's other sub-commands run without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgespec.server.app import ServerConfig, create_app

__all__ = ["ServerConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from edgespec.server import app

        return getattr(app, name)
    raise AttributeError(f"module 'edgespec.server' has no attribute {name!r}")
