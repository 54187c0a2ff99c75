"""create_app(decoder): the ASGI app (Starlette) that serves one SpeculativeDecoder.

The device runs one generation at a time: requests take a Slot (at most max_queue wait;
beyond that 429 with Retry-After) before their template and tokenizer run, and advance the
engine's stream one verify step per call in a worker thread, so a client that disconnects
cancels its generation at the next step. The Guard in front refuses foreign Host headers
(DNS rebinding), foreign Origins, missing API keys and oversized bodies before any route
runs.
"""

from __future__ import annotations

import asyncio
import hmac
import importlib.resources
import json
import logging
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field

import anyio
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.requests import Request as HttpRequest
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edgespec.chat import chat_tokens
from edgespec.engine import Event, SpeculativeDecoder, Stats
from edgespec.errors import ContextOverflowError, EdgespecError
from edgespec.server.api import ApiError, Reply, Request, parse_json, parse_request, sse
from edgespec.server.config import ServerConfig
from edgespec.server.metrics import Metrics, Outcome

log = logging.getLogger(__name__)

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
__all__ = ["ServerConfig", "create_app"]


def create_app(decoder: SpeculativeDecoder, config: ServerConfig = ServerConfig()) -> ASGIApp:
    """An OpenAI-compatible app over decoder; mount it in an ASGI server or another app.
    For prompt-cache reuse, build the decoder with reuse_cache=True (`edgespec serve` does);
    the app must then be the only user of the decoder's runtimes."""
    server = Server(decoder, config)
    routes = [
        Route("/", server.page),
        Route("/health", server.health),
        Route("/metrics", server.metrics_text),
        Route("/v1/models", server.models),
        Route("/v1/completions", server.completions, methods=["POST"]),
        Route("/v1/chat/completions", server.chat_completions, methods=["POST"]),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, ApiError: api_error},  # type: ignore[dict-item]
    )
    app.state.server = server
    return Guard(app, config)


async def http_error(request: HttpRequest, exc: HTTPException) -> Response:
    return error_response(ApiError(exc.status_code, f"{exc.detail}: {request.url.path}"))


async def api_error(request: HttpRequest, exc: ApiError) -> Response:
    return error_response(exc)


def error_response(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), e.status, headers=e.headers)


# --- the device: one generation at a time, a bounded queue ----------------------------------


class Device:
    def __init__(self, max_queue: int) -> None:
        self.max_queue = max_queue
        self.lock = asyncio.Lock()  # FIFO: requests run in arrival order
        self.pending = 0  # slots taken: the running request and those waiting (or tokenizing)
        self.running = 0
        self.mean_s = 1.0  # running mean of a request's time on the device (Retry-After)

    @property
    def waiting(self) -> int:
        return self.pending - self.running

    def reserve(self) -> Slot:
        if self.pending >= 1 + self.max_queue:
            wait = max(1, min(600, math.ceil(self.mean_s * self.pending)))
            raise ApiError(  # full: one request has the device, max_queue wait for it
                429,
                f"the server is busy (a request running and {self.max_queue} waiting, "
                f"--max-queue {self.max_queue}); retry after {wait} s",
                code="queue_full",
                headers={"Retry-After": str(wait)},
            )
        self.pending += 1
        return Slot(self)


@dataclass
class Slot:
    """A request's place in the queue; release() is idempotent (a response's finally)."""

    device: Device
    released: bool = False

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        d = self.device
        await d.lock.acquire()
        d.running = 1
        t0 = time.perf_counter()
        try:
            yield
        finally:
            d.mean_s = 0.8 * d.mean_s + 0.2 * (time.perf_counter() - t0)
            d.running = 0
            d.lock.release()

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.device.pending -= 1


# --- one request on the device --------------------------------------------------------------


@dataclass
class Job:
    """A request's run: its events' times and what it adds to the metrics."""

    tokens: list[int]
    request: Request
    arrived: float = field(default_factory=time.perf_counter)
    events: list[Event] = field(default_factory=list)
    t_first: float | None = None
    t_last: float | None = None
    itl_s: list[float] = field(default_factory=list)

    def note(self, event: Event) -> None:
        now = time.perf_counter()
        if event.tokens:
            if self.t_first is None:
                self.t_first = now
            elif self.t_last is not None:
                self.itl_s.append(now - self.t_last)
            self.t_last = now
        self.events.append(event)

    def outcome(self) -> Outcome:
        last = self.events[-1] if self.events else None
        o = Outcome(
            finished_reason=(last.finish_reason if last else None) or "abort",
            n_prompt=len(self.tokens),
            n_generated=sum(len(e.tokens) for e in self.events),
            ttft_s=None if self.t_first is None else self.t_first - self.arrived,
            itl_s=self.itl_s,
            e2e_s=time.perf_counter() - self.arrived,
        )
        if last is not None and last.stats is not None:
            s = last.stats
            o.steps_by_drafter = {**s.steps_by_drafter, "none": s.n_plain_steps}
        else:  # aborted: the engine's tally of the drafting steps it streamed
            s = Stats()
            for e in self.events:
                if e.n_drafted:
                    s.record("streamed", e.n_drafted, sum(e.from_draft))
        o.n_drafts, o.n_draft_tokens, o.n_accepted = s.n_drafts, s.n_draft_tokens, s.n_accepted
        o.accepted_by_pos = list(s.accepted_by_pos)
        return o


class Server:
    def __init__(self, decoder: SpeculativeDecoder, config: ServerConfig) -> None:
        self.decoder = decoder
        self.config = config
        self.device = Device(config.max_queue)
        self.metrics = Metrics(lambda: self.device.running, lambda: self.device.waiting)
        target = decoder.target
        self.longest_token = max(  # bytes of the longest token text (check_size)
            (len(target.token_text(t)) for t in range(target.n_vocab)), default=1
        )
        self.page_html = importlib.resources.files(__package__).joinpath("page.html").read_bytes()

    # --- routes -----------------------------------------------------------------------------

    async def page(self, request: HttpRequest) -> Response:
        return HTMLResponse(self.page_html, headers={"Content-Security-Policy": PAGE_CSP})

    async def health(self, request: HttpRequest) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics_text(self, request: HttpRequest) -> Response:
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4")

    async def models(self, request: HttpRequest) -> Response:
        target = self.decoder.target
        entry = {
            "id": self.config.model_id,
            "object": "model",
            "created": 0,
            "owned_by": "edgespec",
            "meta": {"n_ctx": target.n_ctx, "n_vocab": target.n_vocab},
        }
        return JSONResponse({"object": "list", "data": [entry]})

    async def completions(self, request: HttpRequest) -> Response:
        return await self.serve(request, chat=False)

    async def chat_completions(self, request: HttpRequest) -> Response:
        return await self.serve(request, chat=True)

    # --- generation -------------------------------------------------------------------------

    async def serve(self, http: HttpRequest, *, chat: bool) -> Response:
        arrived = time.perf_counter()  # time to first token counts parsing and queueing
        data = parse_json(await read_body(http, self.config.max_body_bytes))
        req = parse_request(data, chat=chat, model_id=self.config.model_id)
        self.check_size(req)
        slot = self.device.reserve()  # the template and tokenizer run only for admitted requests
        try:
            tokens = await anyio.to_thread.run_sync(self.prompt_tokens, req)
        except BaseException:
            slot.release()
            raise
        job = Job(tokens, req, arrived)
        reply = Reply(chat, self.config.model_id)
        if req.stream:
            return GenerationResponse(
                self.stream_body(slot, job, reply), slot, media_type="text/event-stream"
            )
        try:
            events = []
            async with aclosing(self.run(slot, job)) as steps:
                async for event in steps:
                    events.append(event)
                    if await http.is_disconnected():
                        log.info("client disconnected; cancelling its generation")
                        return Response(status_code=499)  # nobody reads it
            return JSONResponse(reply.whole(events))
        except ApiError:
            raise
        except Exception as e:
            raise failure(e) from e
        finally:
            slot.release()

    def check_size(self, req: Request) -> None:
        """Refuse, before any template or tokenizer runs, a prompt that cannot fit the context
        whatever it tokenizes to: a message takes a token at least, and a token stands for at
        most as many characters as its text has bytes (twice that here, for a tokenizer's
        normalizer that composes characters). 26,214 one-character messages took 17 s of CPU
        to template and tokenize before they were refused."""
        n_ctx = self.decoder.target.n_ctx
        if len(req.messages) >= n_ctx:
            raise ApiError(
                400,
                f"messages: {len(req.messages):,} messages cannot fit the {n_ctx:,}-token "
                "context (each takes a token or more); send fewer or raise the context size "
                "(--n-ctx)",
                "messages",
                code="context_length_exceeded",
            )
        field_name = "messages" if req.chat else "prompt"
        texts = [m["content"] for m in req.messages] if req.chat else [req.prompt]
        n_chars = sum(len(t) for t in texts if isinstance(t, str))
        if n_chars >= 2 * n_ctx * self.longest_token:
            raise ApiError(
                400,
                f"{field_name}: {n_chars:,} characters cannot fit the {n_ctx:,}-token context "
                f"(no token of this model stands for more than {self.longest_token} bytes); send "
                "a shorter prompt or raise the context size (--n-ctx)",
                field_name,
                code="context_length_exceeded",
            )

    def prompt_tokens(self, req: Request) -> list[int]:
        """The request's prompt as tokens, checked by the engine (vocabulary, context)."""
        field_name = "messages" if req.chat else "prompt"
        target = self.decoder.target
        try:
            prompt = chat_tokens(target, req.messages) if req.chat else req.prompt
            tokens = self.decoder.prompt_tokens(prompt)
        except ContextOverflowError as e:
            raise ApiError(
                400, f"{field_name}: {e}", field_name, code="context_length_exceeded"
            ) from e
        except EdgespecError as e:
            raise ApiError(400, f"{field_name}: {e}", field_name) from e
        return tokens

    async def run(self, slot: Slot, job: Job) -> AsyncGenerator[Event, None]:
        """The engine's events for job, one verify step per worker-thread call. A cancelled
        caller (client gone) still waits for the step in flight: the thread cannot be stopped
        mid-pass, but the stream is closed right after it, which frees the device."""
        req = job.request
        async with slot.turn():
            stream = self.decoder.stream(
                job.tokens,
                max_tokens=req.max_tokens or self.decoder.target.n_ctx,
                sp=req.sp,
                stop=req.stop,
            )
            try:
                while (event := await anyio.to_thread.run_sync(next, stream, None)) is not None:
                    job.note(event)
                    yield event
            finally:
                stream.close()
                outcome = job.outcome()
                if outcome.finished_reason == "abort":
                    log.info("generation cancelled after %d tokens", outcome.n_generated)
                self.metrics.record(outcome)

    async def stream_body(self, slot: Slot, job: Job, reply: Reply) -> AsyncGenerator[bytes, None]:
        first = True
        async with aclosing(self.run(slot, job)) as steps:
            try:
                async for event in steps:
                    yield sse(reply.chunk(event, first=first))
                    first = False
                    if event.stats is not None and job.request.include_usage:
                        yield sse(reply.usage_chunk(event.stats))
                yield sse("[DONE]")
            except Exception as e:  # the response has started: the error goes in the stream
                yield sse(failure(e).body())


def failure(e: Exception) -> ApiError:
    """An error during generation: the input's fault (400) or the server's (500, logged)."""
    if isinstance(e, ApiError):
        return e
    if isinstance(e, EdgespecError):
        return ApiError(400, str(e))
    log.exception("generation failed")
    return ApiError(500, f"generation failed: {type(e).__name__}: {e}")


class GenerationResponse(StreamingResponse):
    """A streamed generation that gives its queue slot back however it ends: finished,
    failed, or cancelled by a disconnect (Starlette cancels the body on http.disconnect)."""

    def __init__(self, body: AsyncGenerator[bytes, None], slot: Slot, *, media_type: str) -> None:
        super().__init__(body, media_type=media_type, headers={"Cache-Control": "no-cache"})
        self.steps = body
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.steps.aclose()
            self.slot.release()


async def read_body(request: HttpRequest, limit: int) -> bytes:
    """The body, refused with 413 past `limit` bytes (declared or streamed)."""
    declared = request.headers.get("content-length")
    too_big = ApiError(
        413, f"the request body is larger than {limit} bytes; send a shorter prompt", code=None
    )
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_big
    chunks = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_big
            chunks.append(chunk)
    except ClientDisconnect:  # not an error: nobody is left to answer
        log.info("client disconnected while sending its body")
        raise ApiError(499, "the client disconnected before its body arrived") from None
    return b"".join(chunks)


# --- the guard: what a browser page elsewhere must not be able to do ------------------------

# the page: its own script and style only; no framing by other sites
PAGE_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'"
)


class Guard:
    """Checks every HTTP request before the app sees it:

    - Host must be a loopback name, the bound address or an --allow-host name (else 403): a
      DNS-rebinding page reaches 127.0.0.1 under its own host name and is refused here.
    - A browser request from another origin (Origin header) is refused (403) unless
      --allow-origin names it; only then are CORS headers sent. Same-origin requests (the
      page at /) pass.
    - /v1 routes need the API key when one is set (401; compared in constant time).
    """

    def __init__(self, app: ASGIApp, config: ServerConfig) -> None:
        self.app = app
        self.config = config
        self.hosts = {h.lower().strip("[]") for h in (*LOOPBACK_NAMES, config.host)}
        self.hosts |= {h.lower().strip("[]") for h in config.allow_hosts}
        self.key = config.api_key.encode() if config.api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if host_name(host) not in self.hosts:
            return await self.refuse(
                scope, receive, send, ApiError(403, f"Host {host!r} is not served here")
            )
        origin = headers.get("origin")
        allowed = origin in self.config.allow_origins
        if origin is not None and not allowed and not same_origin(origin, host):
            return await self.refuse(
                scope,
                receive,
                send,
                ApiError(403, f"Origin {origin!r} may not use this server (--allow-origin)"),
            )
        cors = cors_headers(origin) if allowed and origin is not None else []
        if scope["method"] == "OPTIONS" and cors:  # a CORS preflight
            preflight = Response(status_code=204, headers={k.decode(): v.decode() for k, v in cors})
            return await preflight(scope, receive, send)
        if self.key is not None and scope["path"].startswith("/v1/"):
            given = headers.get("authorization", "")
            scheme, _, token = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), self.key):
                err = ApiError(
                    401,
                    "missing or wrong API key; send Authorization: Bearer KEY",
                    code="invalid_api_key",
                )
                return await self.refuse(scope, receive, send, err, cors)

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start" and cors:
                message["headers"] = [*message["headers"], *cors]
            await send(message)

        await self.app(scope, receive, send_with_cors)

    async def refuse(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        e: ApiError,
        cors: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        body = json.dumps(e.body()).encode()
        headers = [(b"content-type", b"application/json"), *cors]
        await send({"type": "http.response.start", "status": e.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def host_name(host: str) -> str:
    """'127.0.0.1:8000' -> '127.0.0.1'; '[::1]:8000' -> '::1'."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def same_origin(origin: str, host: str) -> bool:
    """The page at / calling its own server: Origin is http://<the Host header>."""
    return origin.lower() in (f"http://{host.lower()}", f"https://{host.lower()}")


def cors_headers(origin: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", origin.encode()),
        (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
        (b"access-control-allow-headers", b"authorization, content-type"),
        (b"vary", b"Origin"),
    ]
