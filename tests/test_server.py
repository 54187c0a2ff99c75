"""`edgespec serve` end to end: a live uvicorn server on a loopback port, the real openai
client (and httpx for what a client library would not send), tiny real llama.cpp models."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from edgespec.app.cli import main
from edgespec.chat import chat_tokens
from edgespec.drafters.model import common_prefix_len
from edgespec.server import ServerConfig, create_app
from tests.live_server import DisconnectWatch, LiveServer, tiny_decoder

MODEL = "tiny"
TIMING_KEYS = {
    "prompt_n",
    "prompt_ms",
    "predicted_n",
    "predicted_ms",
    "predicted_per_second",
    "draft_n",
    "draft_n_accepted",
    "cache_n",
}


@pytest.fixture(scope="module")
def live(tiny_pair):
    with LiveServer(create_app(tiny_decoder(tiny_pair), ServerConfig(model_id=MODEL))) as s:
        yield s


def client_of(server: LiveServer, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


@pytest.fixture(scope="module")
def client(live):
    return client_of(live)


def ask(client, chat: bool, prompt: str, **kwargs):
    if chat:
        messages = [{"role": "user", "content": prompt}]
        return client.chat.completions.create(model=MODEL, messages=messages, **kwargs)
    return client.completions.create(model=MODEL, prompt=prompt, **kwargs)


def text_of(response, chat: bool) -> str:
    choice = response.choices[0]
    if chat:
        return (choice.delta.content if hasattr(choice, "delta") else choice.message.content) or ""
    return choice.text


def metrics(server: LiveServer) -> dict[str, float]:
    """Every sample of /metrics, parsed by prometheus-client: name{labels} -> value."""
    text = httpx.get(server.url + "/metrics").text
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


def wait_for(predicate, what: str, tries: int = 2000) -> None:
    """Poll the server's state (not a timing: the deadline only turns a hang into a failure)."""
    import threading

    for _ in range(tries):
        if predicate():
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"never happened: {what}")


# --- the API ---------------------------------------------------------------------------------


def test_models_health_and_the_page(live, client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert httpx.get(live.url + "/health").json() == {"status": "ok"}
    page = httpx.get(live.url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "connect-src 'self'" in page.headers["content-security-policy"]
    # works offline: nothing is loaded from another host
    assert (
        "http://" not in page.text and "https://" not in page.text and "//" + "cdn" not in page.text
    )


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
def test_streamed_text_equals_the_whole_response_for_the_same_seed(client, chat):
    kwargs = dict(max_tokens=24, temperature=0.9, top_p=0.95, seed=7, extra_body={"top_k": 40})
    whole = ask(client, chat, "the theme of the week", **kwargs)
    chunks = list(
        ask(
            client,
            chat,
            "the theme of the week",
            stream=True,
            stream_options={"include_usage": True},
            **kwargs,
        )
    )
    assert "".join(text_of(c, chat) for c in chunks if c.choices) == text_of(whole, chat)
    x = whole.model_extra["x_edgespec"]
    streamed_tokens = [
        t for c in chunks if c.choices for t in c.model_extra["x_edgespec"]["tokens"]
    ]
    assert streamed_tokens == x["tokens"] and len(x["tokens"]) == whole.usage.completion_tokens
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == whole.choices[0].finish_reason and set(finish[:-1]) == {None}
    last = chunks[-1]  # include_usage: a last chunk with no choices
    assert last.choices == [] and last.usage.completion_tokens == whole.usage.completion_tokens
    for t in (whole.model_extra["timings"], last.model_extra["timings"]):
        assert TIMING_KEYS <= set(t)
        assert t["predicted_n"] == whole.usage.completion_tokens
        assert 0 <= t["draft_n_accepted"] <= t["draft_n"]
        assert t["prompt_n"] + t["cache_n"] == whole.usage.prompt_tokens
    # per chunk: which tokens were drafted and accepted, and the text in provenance spans
    for c in chunks:
        if c.choices:
            info = c.model_extra["x_edgespec"]
            assert len(info["from_draft"]) == len(info["tokens"])
            assert info["draft_n_accepted"] == sum(info["from_draft"]) <= info["draft_n"]
            assert "".join(s["text"] for s in info["spans"]) == text_of(c, chat)
    assert (
        sum(c.model_extra["x_edgespec"]["draft_n"] for c in chunks if c.choices)
        == (whole.model_extra["timings"]["draft_n"])
    )


def test_a_stop_string_ends_the_text_before_it_streamed_or_not(client):
    full = ask(client, False, "def add(a, b):", max_tokens=30, temperature=0).choices[0].text
    stop = full[12:15]
    expected = full[: full.find(stop)]
    whole = ask(client, False, "def add(a, b):", max_tokens=30, temperature=0, stop=[stop])
    chunks = list(
        ask(client, False, "def add(a, b):", max_tokens=30, temperature=0, stop=stop, stream=True)
    )
    assert whole.choices[0].text == expected == "".join(c.choices[0].text for c in chunks)
    assert whole.choices[0].finish_reason == chunks[-1].choices[0].finish_reason == "stop"


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
def test_greedy_output_equals_edgespec_run_json(client, capsys, tiny_pair, chat):
    prompt = "def add(a, b):"
    target, draft = tiny_pair
    argv = ["run", "--target", str(target), "--draft", str(draft), "--drafter", "model"]
    argv += ["--k", "3", "--n-ctx", "512", "--max-tokens", "40", "--json", "--prompt", prompt]
    assert main(argv + (["--chat"] if chat else [])) == 0
    ran = json.loads(capsys.readouterr().out)
    served = ask(client, chat, prompt, max_tokens=40, temperature=0)
    assert served.model_extra["x_edgespec"]["tokens"] == ran["tokens"]
    assert text_of(served, chat) == ran["text"]
    assert served.choices[0].finish_reason == ran["finish_reason"]


def test_the_second_turn_reuses_the_first_and_matches_a_fresh_server(tiny_pair, tiny_runtimes):
    target = tiny_runtimes[0]  # tokenizing only
    turn1 = [{"role": "user", "content": "the theme"}]
    with LiveServer(create_app(tiny_decoder(tiny_pair), ServerConfig(model_id=MODEL))) as s:
        c = client_of(s)
        first = c.chat.completions.create(model=MODEL, messages=turn1, max_tokens=16, temperature=0)
        reply = first.choices[0].message.content
        turn2 = [*turn1, {"role": "assistant", "content": reply}, {"role": "user", "content": "in"}]
        second = c.chat.completions.create(
            model=MODEL, messages=turn2, max_tokens=24, temperature=0
        )
    tokens1, tokens2 = chat_tokens(target, turn1), chat_tokens(target, turn2)
    held = tokens1 + first.model_extra["x_edgespec"]["tokens"]
    cache_n = second.model_extra["timings"]["cache_n"]
    assert first.model_extra["timings"]["cache_n"] == 0
    assert cache_n == common_prefix_len(held, tokens2) >= len(tokens1)
    assert second.usage.prompt_tokens_details.cached_tokens == cache_n
    assert second.model_extra["timings"]["prompt_n"] == len(tokens2) - cache_n
    with LiveServer(create_app(tiny_decoder(tiny_pair), ServerConfig(model_id=MODEL))) as s:
        fresh = client_of(s).chat.completions.create(
            model=MODEL, messages=turn2, max_tokens=24, temperature=0
        )
    assert fresh.model_extra["timings"]["cache_n"] == 0
    assert fresh.model_extra["x_edgespec"]["tokens"] == second.model_extra["x_edgespec"]["tokens"]
    assert fresh.choices[0].message.content == second.choices[0].message.content


# --- one device, a queue ---------------------------------------------------------------------


def test_eight_concurrent_requests_complete_with_the_outputs_they_get_alone(client):
    prompts = [f"def f{i}(x):" for i in range(8)]

    def tokens(prompt: str) -> list[int]:
        r = ask(client, False, prompt, max_tokens=20, temperature=0)
        return r.model_extra["x_edgespec"]["tokens"]

    alone = [tokens(p) for p in prompts]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(tokens, prompts))
    assert together == alone and all(alone)


def test_a_full_queue_answers_429_with_retry_after(tiny_pair):
    decoder = tiny_decoder(tiny_pair, gated=True)
    gate = decoder.target
    gate.allow(0)  # the first request holds the device at its first forward
    app = create_app(decoder, ServerConfig(model_id=MODEL, max_queue=1))
    with LiveServer(app) as s, ThreadPoolExecutor(2) as pool:
        c = client_of(s)
        running = pool.submit(ask, c, False, "one", max_tokens=8, temperature=0)
        gate.wait_blocked()
        waiting = pool.submit(ask, c, False, "two", max_tokens=8, temperature=0)
        wait_for(lambda: metrics(s)["edgespec:num_requests_waiting"] == 1, "one request waiting")
        assert metrics(s)["edgespec:num_requests_running"] == 1
        full = httpx.post(s.url + "/v1/completions", json={"prompt": "three", "max_tokens": 4})
        assert full.status_code == 429 and int(full.headers["retry-after"]) >= 1
        assert full.json()["error"]["code"] == "queue_full"
        assert full.json()["error"]["type"] == "rate_limit_error"
        with pytest.raises(openai.RateLimitError):
            ask(c, True, "four", max_tokens=4)
        gate.allow(None)
        assert running.result().usage.completion_tokens == 8
        assert waiting.result().usage.completion_tokens == 8
        assert metrics(s)["edgespec:num_requests_waiting"] == 0


def test_a_client_that_disconnects_mid_stream_frees_the_device_at_the_next_step(
    tiny_pair, tiny_runtimes
):
    """Counted in verify steps: after the server hears of the disconnect, the target runs
    at most the step in flight, then the next request's prefill and its first step."""
    decoder = tiny_decoder(tiny_pair, gated=True)
    gate = decoder.target
    prompt_a = [{"role": "user", "content": "the theme of the week in the ether"}]
    prompt_b = [{"role": "user", "content": "def add(a, b):"}]
    tokens_b = chat_tokens(tiny_runtimes[0], prompt_b)
    watch = DisconnectWatch(create_app(decoder, ServerConfig(model_id=MODEL)))
    gate.allow(1 + 3)  # A's prefill and three steps; its fourth step is held
    with LiveServer(watch) as s:
        body = {"model": MODEL, "messages": prompt_a, "max_tokens": 300, "temperature": 0}
        with httpx.stream(
            "POST", s.url + "/v1/chat/completions", json={**body, "stream": True}, timeout=300
        ) as r:
            chunks = 0
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    assert json.loads(line[6:])["choices"][0]["finish_reason"] is None
                    chunks += 1
                    if chunks == 3:
                        break
        # the response is closed: the client is gone while A's fourth step is held
        gate.wait_blocked()
        assert watch.seen.wait(60), "the server never heard of the disconnect"
        n_before = len(gate.log)
        gate.allow(None)
        b = client_of(s).chat.completions.create(
            model=MODEL, messages=prompt_b, max_tokens=5, temperature=0
        )
        after = gate.log[n_before:]
        first_b = next(
            i
            for i, (n_past, tokens) in enumerate(after)
            if n_past == len(tokens_b) - 1 and tokens[0] == tokens_b[-1]
        )
        assert first_b <= 2, after[: first_b + 1]  # A's step in flight, B's prefill
        assert b.usage.completion_tokens == 5
        m = metrics(s)
    assert m["edgespec:request_success_total{finished_reason=abort}"] == 1
    assert m["edgespec:num_requests_running"] == 0


# --- bad input and security ------------------------------------------------------------------

LONG = "the " * 600  # > 512 tokens: longer than the tiny server's context

BAD = [
    # (route, body, param, words the message must hold)
    ("chat", {"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"}, "model", "gpt-4"),
    ("chat", {"messages": [{"role": "user", "content": "x"}], "n": 2}, "n", "n must be 1"),
    (
        "chat",
        {"messages": [{"role": "user", "content": "x"}], "temperature": -1},
        "temperature",
        "",
    ),
    ("chat", {"messages": [{"role": "user", "content": "x"}], "temperature": 3}, "temperature", ""),
    (
        "chat",
        {"messages": [{"role": "user", "content": "x"}], "temperature": "hot"},
        "temperature",
        "",
    ),
    ("chat", {"messages": [{"role": "user", "content": "x"}], "top_p": 0}, "top_p", ""),
    ("chat", {"messages": [{"role": "user", "content": "x"}], "top_k": -1}, "top_k", ""),
    ("chat", {"messages": [{"role": "user", "content": "x"}], "top_k": 1.5}, "top_k", ""),
    ("chat", {"messages": [{"role": "user", "content": "x"}], "min_p": 1}, "min_p", ""),
    ("chat", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens", ""),
    (
        "chat",
        {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": True},
        "max_completion_tokens",
        "",
    ),  # fmt: skip
    ("chat", {"messages": [{"role": "user", "content": "x"}], "seed": -3}, "seed", ""),
    ("chat", {"messages": [{"role": "user", "content": "x"}], "stop": [""]}, "stop", ""),
    ("chat", {"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream", ""),
    (
        "chat",
        {"messages": [{"role": "user", "content": "x"}], "stream_options": {}},
        "stream_options",
        "stream: true",
    ),  # fmt: skip
    ("chat", {"messages": [{"role": "user", "content": "x"}], "logprobs": True}, "logprobs", ""),
    ("chat", {"messages": []}, "messages", ""),
    ("chat", {}, "messages", ""),
    ("chat", {"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role", ""),
    ("chat", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content", ""),
    ("chat", {"messages": [{"role": "user", "content": LONG}]}, "messages", "context"),
    ("text", {"prompt": LONG}, "prompt", "context"),
    ("text", {"prompt": ["a", "b"]}, "prompt", "one prompt"),
    ("text", {"prompt": [1, 99999]}, "prompt", "outside the vocabulary"),
    ("text", {}, "prompt", ""),
]


@pytest.mark.parametrize(
    "route,body,param,words", BAD, ids=[f"{b[2]}-{i}" for i, b in enumerate(BAD)]
)
def test_bad_input_gets_400_naming_the_field(live, route, body, param, words):
    path = "/v1/chat/completions" if route == "chat" else "/v1/completions"
    r = httpx.post(live.url + path, json=body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert param.split("[")[0] in error["message"] and words in error["message"]


@pytest.mark.parametrize(
    "content,words",
    [(b"{not json", "not valid JSON"), (b"[1, 2]", "JSON object"), (b"\xff\xfe", "not valid JSON")],
)
def test_a_body_that_is_not_a_json_object_gets_400(live, content, words):
    r = httpx.post(
        live.url + "/v1/completions", content=content, headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and words in r.json()["error"]["message"]


@contextlib.contextmanager
def errors_logged():
    """The records of level ERROR and above the server logs meanwhile (uvicorn's "Exception
    in ASGI application" with its traceback, edgespec's own); attach after the server starts
    (uvicorn's logging set-up removes the handlers of its loggers)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = records.append  # type: ignore[method-assign]
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "edgespec")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield records
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
DEEP = 100_000

RAW_BAD = [
    # (path, raw JSON body, param, words the message must hold)
    (CHAT, rb'{"messages": [{"role": "user", "content": "a\ud800b"}]}', "messages[0].content",
     "lone surrogate"),
    (CHAT, rb'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\udfffb"}]}]}',
     "messages[0].content", "lone surrogate"),
    (TEXT, rb'{"prompt": "a\ud800b", "max_tokens": 2}', "prompt", "lone surrogate"),
    (TEXT, rb'{"prompt": "x", "stop": ["\ud800"], "max_tokens": 2}', "stop", "lone surrogate"),
    (TEXT, b'{"prompt": "x", "max_tokens": 2, "seed": ' + b"7" * 5000 + b"}", "seed",
     "an integer of 5,000 digits"),
    (CHAT, b'{"messages": [{"role": "user", "content": "x"}], "temperature": -' + b"9" * 5000
     + b"}", "temperature", "an integer of 5,000 digits"),
    (TEXT, b'{"prompt": "x", "max_tokens": 2, "user": ' + b"[" * DEEP + b"]" * DEEP + b"}", None,
     "nested"),
    (CHAT, b"[" * DEEP + b"]" * DEEP, None, "nested"),
]  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    "path,content,param,words", RAW_BAD, ids=[f"{p[-16:]}-{i}" for i, (p, *_) in enumerate(RAW_BAD)]
)
def test_text_and_numbers_python_cannot_take_get_400_naming_the_field(
    live, path, content, param, words, stream
):
    """A lone surrogate (valid JSON, not encodable text: the tokenizer raised
    UnicodeEncodeError), an integer past Python's 4,300-digit limit (ValueError) and JSON
    nested past the recursion limit (RecursionError) were 500s with a traceback in the log."""
    if stream and content.startswith(b"{"):
        content = content[:-1] + b', "stream": true}'
    with errors_logged() as errors:
        r = httpx.post(
            live.url + path, content=content, headers={"content-type": "application/json"}
        )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert words in error["message"] and (param or "") in error["message"], error
    assert errors == []


def half_a_request(server: LiveServer, body: bytes = b'{"prompt": "the the', length: int = 1000):
    """A socket that sent a request's headers and the start of its body (no more)."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def test_a_client_that_disconnects_while_sending_its_body_logs_no_error(live):
    """Starlette's ClientDisconnect escaped the body read: "Exception in ASGI application"
    and a 3.3 KB traceback per stalled client."""
    tasks = live.server.server_state.tasks
    with errors_logged() as errors:
        for _ in range(3):
            sock = half_a_request(live)
            wait_for(lambda: len(tasks) == 1, "the request reached the app")
            sock.close()
            wait_for(lambda: not tasks, "the request's task ended")
    assert [r.getMessage() for r in errors] == []


def test_a_conversation_that_cannot_fit_is_refused_before_its_template_runs(tiny_pair):
    """26,214 one-character messages (under 1 MiB) took 17 s of CPU to template and
    tokenize before they were refused; a message takes a token at least, so more messages
    than the context holds are refused unread; likewise more characters than its tokens can
    stand for."""
    decoder = tiny_decoder(tiny_pair, gated=True)
    gate = decoder.target
    longest = max(len(gate.token_text(t)) for t in range(gate.n_vocab))  # 13 bytes
    with LiveServer(create_app(decoder, ServerConfig(model_id=MODEL))) as s:
        body = json.dumps({"messages": [{"role": "user", "content": "x"}] * 26_214}).encode()
        assert len(body) < 1 << 20
        many = httpx.post(
            s.url + CHAT, content=body, headers={"content-type": "application/json"}, timeout=300
        )
        n_chars = 2 * 512 * longest
        long = httpx.post(s.url + TEXT, json={"prompt": "x" * n_chars, "max_tokens": 2})
        parts = [{"type": "text", "text": "y" * (n_chars // 2)}] * 2
        user = {"role": "user", "content": parts}
        long_chat = httpx.post(s.url + CHAT, json={"messages": [user]})
        ok = httpx.post(s.url + TEXT, json={"prompt": "x", "max_tokens": 2}, timeout=300)
    assert gate.n_tokenize == 1 and ok.status_code == 200  # only the last was tokenized
    for r, param, message in [
        (many, "messages", "messages: 26,214 messages cannot fit the 512-token context (each "
                           "takes a token or more); send fewer or raise the context size "
                           "(--n-ctx)"),
        (long, "prompt", f"prompt: {n_chars:,} characters cannot fit the 512-token context (no "
                         f"token of this model stands for more than {longest} bytes); send a "
                         "shorter prompt or raise the context size (--n-ctx)"),
        (long_chat, "messages", f"messages: {n_chars:,} characters cannot fit the 512-token"),
    ]:  # fmt: skip
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "context_length_exceeded" and error["param"] == param
        assert error["message"].startswith(message)


def test_a_request_tokenizes_only_once_admitted_to_the_queue(tiny_pair):
    """Templating and tokenizing count against --max-queue like generating: with the queue
    full, a request gets 429 before its template runs (four slow requests against
    --max-queue 2 all ran). The 429 counts the request holding the device as running, not
    waiting, even before it runs."""
    decoder = tiny_decoder(tiny_pair, gated=True)
    gate = decoder.target
    app = create_app(decoder, ServerConfig(model_id=MODEL, max_queue=0))
    messages = [{"role": "user", "content": "hello"}]
    with LiveServer(app) as s, ThreadPoolExecutor(1) as pool:
        gate.tokenize_open.clear()  # the first request holds its place while tokenizing
        first = pool.submit(ask, client_of(s), True, "hello", max_tokens=3, temperature=0)
        try:
            gate.wait_tokenizing()
            n_tokenize = gate.n_tokenize
            full = httpx.post(s.url + CHAT, json={"messages": messages}, timeout=30)
            assert gate.n_tokenize == n_tokenize  # not tokenized
        finally:
            gate.tokenize_open.set()
        assert first.result().usage.completion_tokens == 3
    assert full.status_code == 429, full.text
    retry = full.headers["retry-after"]
    assert full.json()["error"]["message"] == (
        f"the server is busy (a request running and 0 waiting, --max-queue 0); retry after "
        f"{retry} s"
    )


def read_until_closed(sock: socket.socket) -> bytes:
    """All the server sends until it closes the connection (a hang guard, not a timing)."""
    sock.settimeout(60)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_request_that_does_not_arrive_whole_in_time_gets_408_and_is_closed(tiny_pair):
    """300 connections that sent half a request were held for 60 s, none dropped: uvicorn's
    keep-alive timeout starts only after a response and every byte received stops it."""
    decoder = tiny_decoder(tiny_pair, gated=True)
    gate = decoder.target
    with LiveServer(create_app(decoder, ServerConfig(model_id=MODEL)), request_timeout_s=0.5) as s:
        half_head = socket.create_connection(("127.0.0.1", s.port))
        half_head.sendall(f"POST {TEXT} HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\n".encode())
        silent = socket.create_connection(("127.0.0.1", s.port))
        with errors_logged() as errors:
            half_body = half_a_request(s)
            answers = [read_until_closed(sock) for sock in (half_head, half_body, silent)]
            wait_for(lambda: not s.server.server_state.tasks, "the half body's request ended")
        # a request that arrived whole is not cut, however long it takes to answer
        gate.allow(0)
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(httpx.post, s.url + TEXT, json={"prompt": "x", "max_tokens": 2},
                               timeout=300)  # fmt: skip
            gate.wait_blocked()
            threading.Event().wait(1.0)  # twice the deadline
            gate.allow(None)
            assert slow.result().status_code == 200
    assert errors == []
    for answer in answers:
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
        assert json.loads(body)["error"] == {
            "message": "the request did not arrive whole within 0.5 s; send it at once (the "
            "server's --request-timeout sets this bound)",
            "type": "invalid_request_error",
            "param": None,
            "code": "request_timeout",
        }


def test_bad_input_leaves_the_device_free(live, client):
    for route, body, _, _ in BAD:
        httpx.post(
            live.url + ("/v1/chat/completions" if route == "chat" else "/v1/completions"), json=body
        )
    assert ask(client, False, "def", max_tokens=3, temperature=0).usage.completion_tokens == 3
    m = metrics(live)
    assert m["edgespec:num_requests_running"] == 0 and m["edgespec:num_requests_waiting"] == 0


def test_unknown_routes_and_methods_answer_in_the_error_shape(live):
    assert httpx.get(live.url + "/v1/nothing").json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(live.url + "/v1/completions").status_code == 405


def test_a_foreign_host_header_gets_403(live):
    """DNS rebinding: a page on evil.example whose name now points at 127.0.0.1."""
    for method, path in [("GET", "/v1/models"), ("POST", "/v1/completions"), ("GET", "/")]:
        r = httpx.request(method, live.url + path, headers={"Host": "evil.example"}, json={})
        assert r.status_code == 403 and "evil.example" in r.json()["error"]["message"]
    for host in (f"localhost:{live.port}", f"127.0.0.1:{live.port}", f"[::1]:{live.port}"):
        assert httpx.get(live.url + "/v1/models", headers={"Host": host}).status_code == 200


def test_an_origin_not_allowed_is_refused_without_cors_headers(live, tiny_pair):
    r = httpx.get(live.url + "/v1/models", headers={"Origin": "http://evil.example"})
    assert r.status_code == 403
    assert not any(h.startswith("access-control-") for h in r.headers)
    same = httpx.get(live.url + "/v1/models", headers={"Origin": live.url})  # the page at /
    assert same.status_code == 200 and "access-control-allow-origin" not in same.headers
    config = ServerConfig(model_id=MODEL, allow_origins=("http://app.example",))
    with LiveServer(create_app(tiny_decoder(tiny_pair), config)) as s:
        ok = httpx.get(s.url + "/v1/models", headers={"Origin": "http://app.example"})
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == "http://app.example"
        preflight = httpx.options(
            s.url + "/v1/chat/completions",
            headers={"Origin": "http://app.example", "Access-Control-Request-Method": "POST"},
        )
        assert preflight.status_code == 204
        assert "authorization" in preflight.headers["access-control-allow-headers"]
        other = httpx.get(s.url + "/v1/models", headers={"Origin": "http://evil.example"})
        assert other.status_code == 403 and "access-control-allow-origin" not in other.headers


def test_the_api_key_is_required_on_every_v1_route(tiny_pair):
    config = ServerConfig(model_id=MODEL, api_key="s3cret")
    with LiveServer(create_app(tiny_decoder(tiny_pair), config)) as s:
        for key in (None, "wrong", "s3cre", "s3cret2"):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            for method, path in [
                ("GET", "/v1/models"),
                ("POST", "/v1/completions"),
                ("POST", "/v1/chat/completions"),
            ]:
                r = httpx.request(method, s.url + path, headers=headers, json={})
                assert r.status_code == 401, (key, path)
                assert r.json()["error"]["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            client_of(s, "wrong").models.list()
        assert client_of(s, "s3cret").models.list().data[0].id == MODEL
        assert httpx.get(s.url + "/health").status_code == 200


def test_a_body_over_the_limit_gets_413(tiny_pair):
    config = ServerConfig(model_id=MODEL, max_body_bytes=1000)
    with LiveServer(create_app(tiny_decoder(tiny_pair), config)) as s:
        big = {"prompt": "x" * 2000}
        assert httpx.post(s.url + "/v1/completions", json=big).status_code == 413

        def chunked():  # no Content-Length: counted as it arrives
            yield b'{"prompt": "'
            for _ in range(20):
                yield b"x" * 100
            yield b'"}'

        r = httpx.post(s.url + "/v1/completions", content=chunked())
        assert r.status_code == 413 and "1000 bytes" in r.json()["error"]["message"]
        ok = httpx.post(
            s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=300
        )
        assert ok.status_code == 200


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "inf"])
def test_a_request_timeout_that_is_no_bound_is_refused(tiny_pair, capsys, seconds):
    argv = ["serve", "--target", str(tiny_pair[0]), "--request-timeout", seconds]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"edgespec: error: --request-timeout must be a number of seconds > 0, got "
        f"{float(seconds)}\n"
    )


def test_serve_says_when_it_cuts_the_context(tiny_pair):
    """`edgespec serve --n-ctx 100000` on a 512-token model served 512 without a word."""
    argv = ["serve", "--target", str(tiny_pair[0]), "--drafter", "none", "--n-ctx", "100000"]
    server = subprocess.Popen(
        [sys.executable, "-m", "edgespec", *argv, "--port", "0"], stderr=subprocess.PIPE, text=True
    )
    guard = threading.Timer(120, server.kill)  # a hang guard, not a timing
    guard.start()
    lines = []
    try:
        assert server.stderr is not None
        for line in server.stderr:  # up to the line that says it serves
            lines.append(line.rstrip("\n"))
            if line.startswith("edgespec: serving"):
                break
    finally:
        guard.cancel()
        server.kill()
        server.wait()
    assert lines[-1].startswith("edgespec: serving tiny-target on http://127.0.0.1:0/"), lines
    assert lines[:-1] == [
        "WARNING edgespec: --n-ctx 100000 is more than the model's context holds; using 512"
    ]


# --- metrics ---------------------------------------------------------------------------------


def test_metrics_counters_equal_the_sums_of_the_responses(tiny_pair):
    with LiveServer(create_app(tiny_decoder(tiny_pair), ServerConfig(model_id=MODEL))) as s:
        c = client_of(s)
        whole = [
            ask(c, chat, f"the theme {i}", max_tokens=12 + 4 * i, temperature=0)
            for i, chat in enumerate([True, False, True, False])
        ]
        chunks = [x for x in ask(c, True, "in the", max_tokens=10, temperature=0, stream=True)]
        m = metrics(s)
    steps = [x.model_extra["x_edgespec"] for x in chunks if x.choices]  # one chunk per step
    timings = [r.model_extra["timings"] for r in whole] + [chunks[-1].model_extra["timings"]]
    stats = [r.model_extra["x_edgespec"]["stats"] for r in whole]
    reasons = [r.choices[0].finish_reason for r in whole] + [chunks[-1].choices[0].finish_reason]
    n_drafts = sum(st["n_drafts"] for st in stats) + sum(1 for x in steps if x["draft_n"])
    n_steps = sum(st["n_steps"] for st in stats) + len(steps)

    assert m["edgespec:spec_decode_num_draft_tokens_total"] == sum(t["draft_n"] for t in timings)
    assert m["edgespec:spec_decode_num_accepted_tokens_total"] == sum(
        t["draft_n_accepted"] for t in timings
    )
    assert m["edgespec:generation_tokens_total"] == sum(t["predicted_n"] for t in timings)
    assert m["edgespec:prompt_tokens_total"] == sum(t["prompt_n"] + t["cache_n"] for t in timings)
    assert m["edgespec:spec_decode_num_drafts_total"] == n_drafts
    per_pos = {k: v for k, v in m.items() if "accepted_tokens_per_pos" in k}
    assert sum(per_pos.values()) == m["edgespec:spec_decode_num_accepted_tokens_total"]
    assert set(per_pos) <= {
        f"edgespec:spec_decode_num_accepted_tokens_per_pos_total{{position={i}}}" for i in range(3)
    }
    for reason in set(reasons):
        key = f"edgespec:request_success_total{{finished_reason={reason}}}"
        assert m[key] == reasons.count(reason)
    assert m["edgespec:time_to_first_token_seconds_count"] == len(reasons)
    assert m["edgespec:e2e_request_latency_seconds_count"] == len(reasons)
    # one gap per step after a request's first; a last step that only ends (EOS) emits nothing
    n_gaps = m["edgespec:inter_token_latency_seconds_count"]
    assert n_steps - len(reasons) - reasons.count("stop") <= n_gaps <= n_steps - len(reasons)
    model = m["edgespec:spec_decode_drafter_chosen_ratio{drafter=model}"]
    assert model == pytest.approx(n_drafts / n_steps)
    assert model + m.get("edgespec:spec_decode_drafter_chosen_ratio{drafter=none}", 0) == 1
    assert m["edgespec:num_requests_running"] == 0 and m["edgespec:num_requests_waiting"] == 0


@pytest.mark.real
def test_a_chat_on_the_demo_pair_prefills_only_the_new_turn(demo_target_path, demo_draft_path):
    """The real pair's template and tokenizer: turn 2 reuses turn 1's prompt and reply (the
    reply re-tokenizes to the tokens generated), so it prefills little more than the new
    user message."""
    from edgespec.backends import RuntimeOptions
    from edgespec.loader import SpecOptions, load_decoder

    decoder = load_decoder(
        demo_target_path,
        demo_draft_path,
        SpecOptions(drafter="model", k=4),
        RuntimeOptions(n_ctx=2048),
        reuse_cache=True,
    )
    turn1 = [{"role": "user", "content": "Write a Python function that reverses a string."}]
    with LiveServer(create_app(decoder, ServerConfig(model_id="demo"))) as s:
        c = client_of(s)
        first = c.chat.completions.create(
            model="demo", messages=turn1, max_tokens=48, temperature=0
        )
        reply = first.choices[0].message.content
        turn2 = [*turn1, {"role": "assistant", "content": reply}]
        turn2.append({"role": "user", "content": "Now add type hints."})
        second = c.chat.completions.create(
            model="demo", messages=turn2, max_tokens=8, temperature=0
        )
    tokens1 = chat_tokens(decoder.target, turn1)
    tokens2 = chat_tokens(decoder.target, turn2)
    generated = first.model_extra["x_edgespec"]["tokens"]
    t = second.model_extra["timings"]
    assert t["cache_n"] >= len(tokens1) + len(generated) - 1
    # what is new: the end of the reply's turn and the new user message
    assert t["prompt_n"] == len(tokens2) - t["cache_n"]
    assert t["prompt_n"] <= len(tokens2) - len(tokens1) - len(generated) + 1
