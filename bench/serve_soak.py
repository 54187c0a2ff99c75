"""Soak `edgespec serve`: N requests one after another, then N more C at a time, through the
real openai client against a server in its own process.

Per phase: throughput (completion tokens per second of wall time), time to first token and
request latency (p50, p95), and the server's resident memory (VmRSS) at the start (after one
warm-up request) and at the end: it must not grow with N.

    python bench/serve_soak.py [--target T.gguf --draft D.gguf] [--n 64] [--concurrency 8]
        [--max-tokens 64] [--json docs/results/serve_soak.json]

Without --target it serves the demo pair (edgespec models fetch demo).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import openai

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Explain in two sentences what a hash map is.",
    "Rename the variable `x` to `total`:\n\ndef add(items):\n    x = 0\n    for i in items:\n"
    "        x += i\n    return x\n",
    "Write a shell one-liner that counts the lines of every .py file under src/.",
]


def demo_pair() -> tuple[str, str]:
    from edgespec.app.models import model_path

    return str(model_path("demo-target")), str(model_path("demo-draft"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server(target: str, draft: str | None, extra: list[str], n_ctx: int):
    """`edgespec serve` in its own process on a free loopback port; yields (url, pid)."""
    port = free_port()
    cmd = [sys.executable, "-m", "edgespec", "serve", "--target", target, "--port", str(port)]
    cmd += ["--n-ctx", str(n_ctx), *(["--draft", draft] if draft else []), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(1200):  # model load and calibration
            if proc.poll() is not None:
                raise SystemExit(
                    f"edgespec serve exited: {proc.stderr.read() if proc.stderr else ''}"
                )
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        else:
            raise SystemExit("edgespec serve did not come up in 10 minutes")
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class Call:
    ttft_s: float
    latency_s: float
    completion_tokens: int
    cache_n: int


def stream_chat(
    client: openai.OpenAI, model: str, messages: list[dict], max_tokens: int
) -> tuple[Call, str, dict]:
    """One streamed greedy chat request: its Call, its text and the server's timings."""
    t0 = time.perf_counter()
    ttft = None
    text = []
    usage = timings = None
    for chunk in client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            ttft = ttft if ttft is not None else time.perf_counter() - t0
            text.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage, timings = chunk.usage, chunk.model_extra["timings"]
    latency = time.perf_counter() - t0
    assert usage is not None and timings is not None
    first = ttft if ttft is not None else latency
    call = Call(first, latency, usage.completion_tokens, timings["cache_n"])
    return call, "".join(text), timings


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def phase(name: str, calls: list[Call], wall_s: float) -> dict:
    ttft = [c.ttft_s for c in calls]
    lat = [c.latency_s for c in calls]
    return {
        "phase": name,
        "requests": len(calls),
        "tokens_per_s": sum(c.completion_tokens for c in calls) / wall_s,
        "ttft_p50_s": statistics.median(ttft),
        "ttft_p95_s": percentile(ttft, 0.95),
        "latency_p50_s": statistics.median(lat),
        "latency_p95_s": percentile(lat, 0.95),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--target")
    ap.add_argument("--draft")
    ap.add_argument("--n", type=int, default=64, help="requests per phase")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--serve-arg", action="append", default=[], help="passed to edgespec serve")
    ap.add_argument("--json")
    args = ap.parse_args()
    target, draft = (args.target, args.draft) if args.target else demo_pair()
    extra = [*args.serve_arg, "--max-queue", str(max(8, args.concurrency))]
    with server(target, draft, extra, args.n_ctx) as (url, pid):
        client = openai.OpenAI(base_url=url + "/v1", api_key="-", max_retries=0, timeout=600)
        model = client.models.list().data[0].id

        def one(i: int) -> Call:
            messages = [{"role": "user", "content": PROMPTS[i % len(PROMPTS)] + f" (#{i})"}]
            return stream_chat(client, model, messages, args.max_tokens)[0]

        one(-1)  # warm-up: first-use allocations are not growth
        rss_start = rss_mib(pid)
        t0 = time.perf_counter()
        sequential = [one(i) for i in range(args.n)]
        rows = [phase("sequential", sequential, time.perf_counter() - t0)]
        rss_mid = rss_mib(pid)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as pool:
            concurrent = list(pool.map(one, range(args.n, 2 * args.n)))
        rows.append(phase(f"concurrent x{args.concurrency}", concurrent, time.perf_counter() - t0))
        rss_end = rss_mib(pid)
    memory = {"rss_start_mib": rss_start, "rss_after_sequential_mib": rss_mid}
    memory["rss_end_mib"] = rss_end
    print(f"{'phase':<16} {'reqs':>5} {'tok/s':>7} {'ttft p50':>9} {'ttft p95':>9}", end="")
    print(f" {'lat p50':>8} {'lat p95':>8}")
    for r in rows:
        print(f"{r['phase']:<16} {r['requests']:>5} {r['tokens_per_s']:>7.1f}", end="")
        print(f" {r['ttft_p50_s']:>9.3f} {r['ttft_p95_s']:>9.3f}", end="")
        print(f" {r['latency_p50_s']:>8.2f} {r['latency_p95_s']:>8.2f}")
    print(
        f"server RSS MiB: start {rss_start:.0f}, after sequential {rss_mid:.0f}, end {rss_end:.0f}"
    )
    if args.json:
        out = {
            "target": target,
            "draft": draft,
            "n": args.n,
            "concurrency": args.concurrency,
            "max_tokens": args.max_tokens,
            "phases": rows,
            "memory": memory,
            "calls": {
                "sequential": [asdict(c) for c in sequential],
                "concurrent": [asdict(c) for c in concurrent],
            },
            "cpu_count": os.cpu_count(),
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
