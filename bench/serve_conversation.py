"""What prompt-cache reuse saves on a 6-turn chat: time to first token per turn, with reuse
(`edgespec serve`'s default) and without (--no-prompt-cache), the same greedy conversation.

Each turn sends the whole conversation so far, as chat clients do. Per turn and mode: prompt
tokens, tokens reused (timings.cache_n), tokens prefilled (prompt_n), prefill ms
(timings.prompt_ms) and the client's time to first token. Both modes must give the same
replies (greedy); where llama.cpp's batch-variance makes them part at a near-tie the row
says so, and later turns then differ in content, not only in timing.

    python bench/serve_conversation.py [--target T.gguf --draft D.gguf] [--max-tokens 128]
        [--turns 6] [--json docs/results/serve_conversation.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import openai
from serve_soak import demo_pair, server, stream_chat

TURNS = [
    "Write a Python function that parses a CSV line into a list of fields, handling quotes.",
    "Add a docstring and type hints to it.",
    "Now make it accept a custom delimiter.",
    "Write three pytest tests for it.",
    "One test should cover an empty field between two delimiters. Show only that test.",
    "Summarize what the function does in one sentence.",
]


def conversation(url: str, max_tokens: int, turns: list[str]) -> list[dict]:
    client = openai.OpenAI(base_url=url + "/v1", api_key="-", max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    messages: list[dict] = []
    rows = []
    for i, text in enumerate(turns, start=1):
        messages.append({"role": "user", "content": text})
        call, reply, timings = stream_chat(client, model, messages, max_tokens)
        messages.append({"role": "assistant", "content": reply})
        rows.append(
            {
                "turn": i,
                "prompt_tokens": timings["prompt_n"] + timings["cache_n"],
                "cache_n": timings["cache_n"],
                "prompt_n": timings["prompt_n"],
                "prompt_ms": timings["prompt_ms"],
                "ttft_s": call.ttft_s,
                "reply": reply,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--target")
    ap.add_argument("--draft")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--turns", type=int, default=len(TURNS), help="the first N turns (checks)")
    ap.add_argument("--json")
    args = ap.parse_args()
    target, draft = (args.target, args.draft) if args.target else demo_pair()
    results = {}
    for mode, extra in (("reuse", []), ("no reuse", ["--no-prompt-cache"])):
        with server(target, draft, extra, args.n_ctx) as (url, _):
            results[mode] = conversation(url, args.max_tokens, TURNS[: args.turns])
    print(f"{'turn':>4} {'prompt':>6} | {'reused':>6} {'prefill':>7} {'ttft s':>7} | "
          f"{'prefill':>7} {'ttft s':>7} | same reply")  # fmt: skip
    for a, b in zip(results["reuse"], results["no reuse"]):
        print(
            f"{a['turn']:>4} {a['prompt_tokens']:>6} | {a['cache_n']:>6} {a['prompt_n']:>7} "
            f"{a['ttft_s']:>7.3f} | {b['prompt_n']:>7} {b['ttft_s']:>7.3f} | "
            f"{'yes' if a['reply'] == b['reply'] else 'no'}"
        )
    if args.json:
        out = {"target": target, "draft": draft, "max_tokens": args.max_tokens, **results}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
