"""The OpenAI API's shapes: request bodies -> a checked Request, events -> response JSON.

Every bad input becomes an ApiError whose message names the field and the fix, in the
OpenAI error JSON shape. Nothing here decodes: the engine does (SpeculativeDecoder.stream).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from edgespec.engine import Event, Stats
from edgespec.sampling import CUTS, SamplingParams, in_range, span_text

MAX_STOP = 16  # stop strings per request
ROLES = ("system", "developer", "user", "assistant", "tool")
# fields that would change the output in ways this server does not implement: refused when
# set to anything but their neutral value, so a client never gets silently different output
UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "logprobs": (None, False, 0),
    "top_logprobs": (None, 0),
    "logit_bias": (None, {}),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "tools": (None, []),
    "functions": (None, []),
    "echo": (None, False),
    "best_of": (None, 1),
    "suffix": (None, ""),
}


class ApiError(Exception):
    """An error answered in OpenAI's shape: {"error": {message, type, param, code}}."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        if self.status == 401:
            kind = "authentication_error"
        elif self.status == 429:
            kind = "rate_limit_error"
        return {
            "error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        }


@dataclass(frozen=True)
class Request:
    """One checked generation request: chat (messages) or text completion (prompt)."""

    chat: bool
    messages: tuple[dict[str, str], ...]  # chat: role and content, as the template wants
    prompt: str | tuple[int, ...]  # completion: text or token ids
    max_tokens: int | None  # None: until the context is full
    sp: SamplingParams
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool


class LongInteger:
    """A JSON integer longer than MAX_INT_DIGITS: no count, id or seed here is that long, and
    Python refuses int() past 4,300 digits (a ValueError no field could name). Kept as its
    length, it fails the check of the field it is in, whose error names the field."""

    def __init__(self, digits: str) -> None:
        self.n_digits = len(digits.lstrip("-"))

    def __repr__(self) -> str:
        return f"an integer of {self.n_digits:,} digits"


MAX_INT_DIGITS = 100  # 2**256 has 78


def json_int(digits: str) -> int | LongInteger:
    return int(digits) if len(digits) <= MAX_INT_DIGITS else LongInteger(digits)


def parse_json(body: bytes) -> dict:
    try:
        data = json.loads(body, parse_int=json_int)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}; send a JSON object") from e
    except RecursionError:
        raise ApiError(
            400,
            "the request body's JSON is nested deeper than it can be parsed; send a JSON object "
            "nested a few levels, as the OpenAI API's requests are",
        ) from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object, got " + type(data).__name__)
    return data


def parse_request(data: dict, *, chat: bool, model_id: str) -> Request:
    model = data.get("model")
    if model is not None and model != model_id:
        raise ApiError(
            400,
            f"model {model!r} is not served here; use {model_id!r} (GET /v1/models)",
            "model",
            code="model_not_found",
        )
    n = data.get("n", 1)
    if n != 1 or isinstance(n, bool):
        raise ApiError(400, f"n must be 1 (one choice per request), got {n!r}", "n")
    for name, neutral in UNSUPPORTED.items():
        value = data.get(name)
        if name in data and not any(value == v and type(value) is type(v) for v in neutral):
            raise ApiError(400, f"{name} is not supported by this server; leave it out", name)
    stream = flag(data, "stream")
    options = data.get("stream_options")
    if options is not None and not stream:
        raise ApiError(400, "stream_options is only allowed with stream: true", "stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "stream_options must be an object", "stream_options")
    cuts: dict[str, Any] = {
        c.name: number(data, c.name, c.off, c.low, c.high, c.open_low, c.open_high) for c in CUTS
    }
    return Request(
        chat=chat,
        messages=parse_messages(data) if chat else (),
        prompt=() if chat else parse_prompt(data),
        max_tokens=parse_max_tokens(data),
        sp=SamplingParams(
            temperature=number(data, "temperature", 1.0, 0.0, 2.0),
            top_k=whole(data, "top_k", 0, 0) or 0,
            seed=whole(data, "seed", None, 0),
            **cuts,
        ),
        stop=parse_stop(data),
        stream=stream,
        include_usage=flag(options or {}, "include_usage", "stream_options.include_usage"),
    )


def flag(data: dict, name: str, label: str | None = None) -> bool:
    value = data.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"{label or name} must be true or false, got {value!r}", label or name)
    return value


def number(
    data: dict,
    name: str,
    default: float,
    low: float,
    high: float,
    open_low: bool = False,
    open_high: bool = False,
) -> float:
    value = data.get(name)
    if value is None:
        return default
    if not in_range(value, low, high, open_low=open_low, open_high=open_high):
        span = span_text(low, high, open_low=open_low, open_high=open_high)
        raise ApiError(400, f"{name} must be a number in {span}, got {value!r}", name)
    return float(value)


def whole(data: dict, name: str, default: int | None, low: int) -> int | None:
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ApiError(400, f"{name} must be a whole number >= {low}, got {value!r}", name)
    return value


def parse_max_tokens(data: dict) -> int | None:
    """max_completion_tokens (the chat API's current name) wins over max_tokens."""
    for name in ("max_completion_tokens", "max_tokens"):
        if data.get(name) is not None:
            return whole(data, name, None, 1)
    return None


def parse_stop(data: dict) -> tuple[str, ...]:
    stop = data.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise ApiError(400, "stop must be a non-empty string or a list of them", "stop")
    if len(stops) > MAX_STOP:
        raise ApiError(400, f"stop holds {len(stops)} strings; at most {MAX_STOP}", "stop")
    return tuple(encodable(s, "stop") for s in stops)


def parse_messages(data: dict) -> tuple[dict[str, str], ...]:
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content}", "messages")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise ApiError(400, f"{where} must be an object with role and content", where)
        role = m.get("role")
        if role not in ROLES:
            raise ApiError(400, f"{where}.role must be one of {', '.join(ROLES)}", f"{where}.role")
        out.append({"role": role, "content": message_text(m.get("content"), f"{where}.content")})
    return tuple(out)


def message_text(content: Any, where: str) -> str:
    """A message's content: a string, or a list of text parts joined (images are refused)."""
    if isinstance(content, str):
        return encodable(content, where)
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text"):
                raise ApiError(400, f"{where} may hold only text parts", where)
            if not isinstance(part.get("text"), str):
                raise ApiError(400, f"{where}: a text part needs a string 'text'", where)
            parts.append(part["text"])
        return encodable("".join(parts), where)
    raise ApiError(400, f"{where} must be a string or a list of text parts", where)


def encodable(text: str, where: str) -> str:
    """text, refused if it holds a lone surrogate: JSON may write one ("\\ud800"), but it is
    no character, so no UTF-8 tokenizer can take it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ApiError(
            400,
            f"{where} holds a lone surrogate ({text[e.start]!r} at character {e.start:,}): half "
            "a UTF-16 pair is no character; send whole pairs, or the text as UTF-8",
            where,
        ) from None
    return text


def parse_prompt(data: dict) -> str | tuple[int, ...]:
    """A string, a list of token ids, or a list holding one of those (one prompt only)."""
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return encodable(prompt, "prompt")
    if isinstance(prompt, list) and prompt and all(is_token(t) for t in prompt):
        return tuple(prompt)
    raise ApiError(
        400,
        "prompt must be a non-empty string or a list of token ids (one prompt per request)",
        "prompt",
    )


def is_token(t: Any) -> bool:
    return isinstance(t, int) and not isinstance(t, bool)


# --- responses ------------------------------------------------------------------------------


def new_id(chat: bool) -> str:
    return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]


def usage(stats: Stats) -> dict:
    return {
        "prompt_tokens": stats.n_prompt,
        "completion_tokens": stats.n_generated,
        "total_tokens": stats.n_prompt + stats.n_generated,
        "prompt_tokens_details": {"cached_tokens": stats.n_cached},
    }


def timings(stats: Stats) -> dict:
    """llama-server's timings object: prompt_n counts the prompt tokens actually processed
    (cache_n were reused); predicted_* cover decoding after the prefill."""
    prompt_n = stats.n_prompt - stats.n_cached
    prompt_ms = stats.t_prefill * 1e3
    predicted_ms = stats.t_decode * 1e3
    n = stats.n_generated
    return {
        "cache_n": stats.n_cached,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": prompt_n / stats.t_prefill if stats.t_prefill > 0 else 0.0,
        "predicted_n": n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / n if n else 0.0,
        "predicted_per_second": stats.tokens_per_second,
        "draft_n": stats.n_draft_tokens,
        "draft_n_accepted": stats.n_accepted,
    }


def spans(event: Event) -> list[dict]:
    """The event's text in runs of one provenance: from_draft true for text of draft tokens
    the target accepted, false for tokens the target chose itself. Text held back until the
    end (stop-string prefixes, split characters) counts as the last token's."""
    out: list[dict] = []
    last = False
    pieces = list(zip(event.pieces, event.from_draft))
    tail = event.text[sum(len(p) for p in event.pieces) :]
    if tail:
        pieces.append((tail, event.from_draft[-1] if event.from_draft else False))
    for text, drafted in pieces:
        if not text:
            continue
        if out and last == drafted:
            out[-1]["text"] += text
        else:
            out.append({"text": text, "from_draft": drafted})
        last = drafted
    return out


def step_info(event: Event) -> dict:
    """x_edgespec of one streamed chunk: where its tokens came from."""
    return {
        "tokens": list(event.tokens),
        "from_draft": list(event.from_draft),
        "spans": spans(event),
        "draft_n": event.n_drafted,
        "draft_n_accepted": sum(event.from_draft),
    }


@dataclass
class Reply:
    """Builds the response JSON of one request from its events."""

    chat: bool
    model: str
    id: str = ""
    created: int = 0

    def __post_init__(self) -> None:
        self.id = self.id or new_id(self.chat)
        self.created = self.created or int(time.time())

    def head(self, kind: str) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def whole(self, events: Sequence[Event]) -> dict:
        last = events[-1]
        assert last.stats is not None and last.finish_reason is not None
        text = "".join(e.text for e in events)
        choice: dict[str, Any] = {"index": 0, "finish_reason": last.finish_reason, "logprobs": None}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return {
            **self.head("chat.completion" if self.chat else "text_completion"),
            "choices": [choice],
            "usage": usage(last.stats),
            "timings": timings(last.stats),
            "x_edgespec": {
                "tokens": [t for e in events for t in e.tokens],
                "from_draft": [d for e in events for d in e.from_draft],
                "stats": last.stats.as_dict(),
            },
        }

    def chunk(self, event: Event | None, *, first: bool = False) -> dict:
        """One streamed chunk: the event's text (None: the opening chunk of a chat, which
        carries the role), finish_reason and timings on the last."""
        text = event.text if event else ""
        choice: dict[str, Any] = {"index": 0, "logprobs": None}
        if self.chat:
            choice["delta"] = {"role": "assistant", "content": text} if first else {"content": text}
        else:
            choice["text"] = text
        choice["finish_reason"] = event.finish_reason if event else None
        out = {
            **self.head("chat.completion.chunk" if self.chat else "text_completion"),
            "choices": [choice],
        }
        if event is not None:
            out["x_edgespec"] = step_info(event)
            if event.stats is not None:
                out["timings"] = timings(event.stats)
        return out

    def usage_chunk(self, stats: Stats) -> dict:
        """stream_options.include_usage: a last chunk with no choices and the usage."""
        return {
            **self.head("chat.completion.chunk" if self.chat else "text_completion"),
            "choices": [],
            "usage": usage(stats),
            "timings": timings(stats),
        }


def sse(data: dict | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n".encode()
