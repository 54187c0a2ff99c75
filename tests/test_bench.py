"""`edgespec bench`: methods in turn per prompt, speedups with intervals, categories, machine.

Real llama.cpp on the tiny float32 pair (no timing is asserted: only order, counts, maths)."""

import json
import math

import pytest

from edgespec.app.bench_command import bench_suites, by_category, run_bench
from edgespec.app.bench_runs import (
    BATCH_NOISE,
    NEAR_TIE,
    PEER,
    PEER_PLAIN,
    Run,
    near_tie,
    paired_speedup,
    t_quantile_975,
)
from edgespec.app.cli import main
from edgespec.app.suites import Prompt, load_suite
from edgespec.backends import RuntimeOptions


def prompt(pid: str, text: str) -> Prompt:
    return Prompt(pid, ({"role": "user", "content": text},), None)


def test_methods_take_turns_per_prompt_and_repeats_run_backwards(tiny_pair):
    pytest.importorskip("llama_cpp")
    target, draft = tiny_pair
    prompts = [prompt("math-01", "the the the"), prompt("math-02", "def f(x): return x")]
    report = run_bench(
        target, draft, prompts, ["auto", "ngram", PEER], [2], 6,
        RuntimeOptions(n_ctx=256, n_threads=1), repeat=2, peer_ks=[3],
    )  # fmt: skip
    labels = ["plain", "auto", "ngram k=2", PEER_PLAIN, f"{PEER} k=3"]
    expected = [f"0:{p.id}:{m}" for p in prompts for m in labels]
    expected += [f"1:{p.id}:{m}" for p in prompts for m in reversed(labels)]
    assert report["order"] == expected
    rows = {(r["method"], r["k"]): r for r in report["rows"]}
    assert [r["prompts"] for r in report["rows"]] == [4] * 5  # 2 prompts x 2 repeats each
    # float32 toy models: every method gives plain's tokens, the peer's included
    assert all(r["identical"] == 4 for r in report["rows"]), report["rows"]
    assert rows[(PEER, 3)]["baseline"] == PEER_PLAIN
    assert rows[(PEER_PLAIN, "-")]["baseline"] == "plain"
    assert rows[("auto", "auto")]["baseline"] == "plain"
    assert rows[("plain", "-")]["speedup"] is None
    assert len(rows[("auto", "auto")]["speedup_ci95"]) == 2  # two prompts: an interval
    assert [run["repeat"] for run in rows[("auto", "auto")]["runs"]] == [0, 0, 1, 1]
    assert report["categories"] == {"math-01": "math", "math-02": "math"}
    machine = report["machine"]
    assert machine["cpu"] and machine["cores"] >= 1
    assert "flags" in machine and isinstance(machine["flags"], list)
    assert report["speedup_method"].startswith("geometric mean of per-prompt paired speedups")


def test_several_suites_run_on_one_opened_pair(tiny_pair, monkeypatch):
    """Loading the pair takes minutes on a small CPU: once per command, not per suite."""
    pytest.importorskip("llama_cpp")
    import edgespec.app.bench_command as bench_command

    opened = []
    real_open_pair = bench_command.open_pair
    monkeypatch.setattr(
        bench_command, "open_pair", lambda *a, **kw: opened.append(a) or real_open_pair(*a, **kw)
    )
    suites = {
        "one": [prompt("a-1", "the the the")],
        "two": [prompt("b-1", "x = 1"), prompt("b-2", "y")],
    }
    reports = dict(
        bench_suites(*tiny_pair, suites, ["auto"], [2], 4, RuntimeOptions(n_ctx=256, n_threads=1))
    )
    assert len(opened) == 1
    assert {name: r["prompts"] for name, r in reports.items()} == {
        "one": ["a-1"],
        "two": ["b-1", "b-2"],
    }
    assert reports["two"]["order"] == ["0:b-1:plain", "0:b-1:auto", "0:b-2:plain", "0:b-2:auto"]


def run(pid: str, tokens: int, seconds: float, repeat: int = 0, **stats) -> Run:
    return Run(pid, tokens, seconds, True, repeat, stats=stats)


def test_near_tie_is_twice_the_measured_noise_of_the_back_end():
    """Two logits that each move by up to d between pass widths can swap only where their
    gap is below 2d: the near-tie bound is 2 x the back-end's measured max |delta|, 0 with
    --exact, the largest figure for a back-end never measured."""
    from edgespec.runtimes.onnxrt import OnnxRuntime

    pytest.importorskip("llama_cpp")
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    assert set(BATCH_NOISE) == {LlamaCppRuntime.__name__, OnnxRuntime.__name__}
    assert near_tie("LlamaCppRuntime") == pytest.approx(1.42)
    assert near_tie("OnnxRuntime") == pytest.approx(1.26)
    assert near_tie("LlamaCppRuntime", exact=True) == near_tie("OnnxRuntime", exact=True) == 0
    assert near_tie("TensorRTRuntime") == NEAR_TIE == pytest.approx(1.42)
    d = BATCH_NOISE["LlamaCppRuntime"]
    for gap in (near_tie("LlamaCppRuntime") - 0.01, near_tie("LlamaCppRuntime") + 0.01):
        top, second = 10.0, 10.0 - gap
        swapped = second + d > top - d  # each moved by d toward the other
        assert swapped == (gap < near_tie("LlamaCppRuntime"))


def test_paired_speedup_on_known_ratios():
    base = [run("a", 10, 2.0), run("b", 10, 2.0), run("c", 10, 2.0)]  # 5 tok/s each
    mine = [run("a", 20, 2.0), run("b", 10, 2.0), run("c", 40, 2.0)]  # ratios 2, 1, 4
    s = paired_speedup(mine, base)
    assert s is not None
    # logs ln2, 0, 2 ln2: mean ln2, sample sd ln2; t(0.975, 2 df) = 4.3027
    half = 4.3027 * math.log(2) / math.sqrt(3)
    assert s.gmean == pytest.approx(2.0, abs=1e-4)
    assert s.lo == pytest.approx(2 * math.exp(-half), abs=1e-4)
    assert s.hi == pytest.approx(2 * math.exp(half), abs=1e-4)
    assert (s.n, s.pooled) == (3, pytest.approx(70 / 30, abs=1e-4))


def test_repeats_pool_per_prompt_and_one_prompt_has_no_interval():
    base = [run("a", 10, 1.0, 0), run("a", 10, 3.0, 1)]  # 20 tokens in 4 s: 5 tok/s
    mine = [run("a", 15, 1.0, 0), run("a", 15, 2.0, 1)]  # 30 in 3 s: 10 tok/s
    s = paired_speedup(mine, base)
    assert s is not None
    assert (s.gmean, s.lo, s.hi, s.n) == (2.0, None, None, 1)
    assert paired_speedup([run("a", 0, 1.0)], base) is None  # nothing generated: no ratio


def test_identical_ratios_give_a_zero_width_interval():
    base = [run(p, 10, 1.0) for p in "abcd"]
    mine = [run(p, 15, 1.0) for p in "abcd"]
    s = paired_speedup(mine, base)
    assert s is not None and s.gmean == s.lo == s.hi == 1.5


@pytest.mark.parametrize(
    "df, t", [(1, 12.7062), (5, 2.5706), (30, 2.0423), (31, 2.0395), (60, 2.0003), (120, 1.9799)]
)
def test_t_quantiles(df, t):
    assert t_quantile_975(df) == pytest.approx(t, abs=2e-4)


def report_row(method, k, baseline, runs):
    return {"method": method, "k": k, "baseline": baseline, "runs": [r.__dict__ for r in runs]}


def test_by_category_groups_prompts_by_id_prefix():
    ids = ["math-01", "math-02", "rag-01", "rag-02", "loose"]
    plain = [run(p, 10, 1.0) for p in ids]
    auto = [
        run("math-01", 20, 1.0, n_steps=5, n_plain_steps=1, n_draft_tokens=8, n_accepted=6),
        run("math-02", 20, 1.0, n_steps=5, n_plain_steps=3, n_draft_tokens=4, n_accepted=4),
        run("rag-01", 10, 1.0, n_steps=10, n_plain_steps=10),
        run("rag-02", 5, 1.0, n_steps=5, n_plain_steps=5),
        run("loose", 10, 1.0),
    ]
    report = {
        "categories": {p: prompt(p, "x").category for p in ids},
        "rows": [report_row("plain", "-", None, plain), report_row("auto", "auto", "plain", auto)],
    }
    assert report["categories"]["loose"] is None
    groups = by_category(report)
    assert list(groups) == ["math", "rag"]  # "loose" has no category
    (math_row,) = groups["math"]
    assert (math_row["prompts"], math_row["speedup"], math_row["speedup_ci95"]) == (
        2,
        2.0,
        [2.0, 2.0],
    )
    assert (math_row["acceptance_rate"], math_row["n_drafts"]) == (round(10 / 12, 4), 6)
    (rag_row,) = groups["rag"]
    assert rag_row["speedup"] == pytest.approx(math.sqrt(0.5), abs=1e-4)
    assert (rag_row["acceptance_rate"], rag_row["n_drafts"]) == (None, 0)


def test_open_suite_has_its_categories():
    suite = load_suite("open")
    categories = {p.category for p in suite}
    assert len(suite) >= 60 and len({p.id for p in suite}) == len(suite)
    assert categories == {
        "factual", "reasoning", "math", "translate", "summarize", "extract", "rag", "writing",
        "roleplay", "code-explain", "advice",
    }  # fmt: skip
    assert all(sum(p.category == c for p in suite) >= 5 for c in categories)
    assert all(p.max_tokens == 256 and len(p.messages) == 1 for p in suite)


def test_bench_command_prints_machine_and_categories(capsys, tiny_pair, tmp_path):
    pytest.importorskip("llama_cpp")
    target, draft = tiny_pair
    suite = tmp_path / "mine.jsonl"
    lines = [
        {"id": f"{c}-{i}", "messages": [{"role": "user", "content": f"{c} {i} the the"}]}
        for c in ("alpha", "beta")
        for i in (1, 2)
    ]
    suite.write_text("\n".join(json.dumps(x) for x in lines))
    out_json = tmp_path / "bench.json"
    code = main(
        ["bench", "--target", str(target), "--draft", str(draft), "--suite", str(suite),
         "--methods", "plain,auto", "--max-tokens", "5", "--threads", "1", "--n-ctx", "256",
         "--by-category", "--json", str(out_json)]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "machine: " in out and "speedup: geometric mean of per-prompt paired" in out
    table = out[out.index("category ") :].splitlines()
    assert [line.split()[:2] for line in table[1:3]] == [["alpha", "auto"], ["beta", "auto"]]
    report = json.loads(out_json.read_text())["suites"][str(suite)]
    assert set(report["by_category"]) == {"alpha", "beta"}
    assert report["machine"]["flags"] == report["machine"]["flags"]  # recorded, a list
    assert len(report["order"]) == 8


def test_the_peer_needs_a_gguf_target(tmp_path):
    from edgespec.errors import EdgespecError
    from edgespec.export.onnx_export import export_onnx
    from tests.tiny_hf import make_tiny_hf

    pytest.importorskip("onnx")
    folder = export_onnx(make_tiny_hf(tmp_path / "hf", arch="qwen2", seed=3), tmp_path / "onnx")
    with pytest.raises(EdgespecError) as e:
        run_bench(folder, None, [prompt("a-1", "x")], [PEER], [2], 4, RuntimeOptions(n_ctx=64))
    assert str(e.value) == (
        f"method {PEER} runs llama-cpp-python on a GGUF target, not {folder}; "
        "drop it from --methods"
    )


def test_fixed_k_model_drafts_run_beside_auto_on_the_same_prompts(tiny_pair):
    """`--methods plain,model,auto --k 1,2`: the model drafter at k = 1 and 2, each step
    exactly k tokens (room allowing), against auto and plain, prompt by prompt."""
    pytest.importorskip("llama_cpp")
    target, draft = tiny_pair
    prompts = [prompt("open-01", "the theme of the week")]
    report = run_bench(
        target, draft, prompts, ["plain", "model", "auto"], [1, 2], 8,
        RuntimeOptions(n_ctx=256, n_threads=1),
    )  # fmt: skip
    assert report["order"] == [
        f"0:open-01:{m}" for m in ("plain", "model k=1", "model k=2", "auto")
    ]
    rows = {(r["method"], r["k"]): r for r in report["rows"]}
    for k in (1, 2):
        stats = rows[("model", k)]["runs"][0]["stats"]
        assert stats["steps_by_drafter"] == {"model": stats["n_drafts"]} and stats["n_drafts"] > 0
        assert stats["drafted_by_drafter"]["model"] <= k * stats["n_drafts"]
        assert stats["drafted_by_drafter"]["model"] > (k - 1) * stats["n_drafts"]
        assert rows[("model", k)]["identical"] == 1


def test_seeded_sampling_runs_every_method_on_one_seed_and_equals_plain(tiny_pair):
    """`--temperature 0.8 --seed 7`: plain and speculative methods sample with the same
    position-keyed noise, so (float32 toy models: batch-invariant) every output is plain's;
    and it is a sample, not the greedy output."""
    pytest.importorskip("llama_cpp")
    from edgespec.app.bench_runs import Bench
    from edgespec.pair import open_pair
    from edgespec.sampling import SamplingParams

    target, draft = tiny_pair
    prompts = [prompt("open-01", "the theme of the week"), prompt("open-02", "def f(x):")]
    opts = RuntimeOptions(n_ctx=256, n_threads=1)
    seeded = run_bench(
        target, draft, prompts, ["plain", "model", "ngram", "auto"], [3], 24, opts,
        sp=SamplingParams(0.8, seed=7),
    )  # fmt: skip
    assert [r["identical"] for r in seeded["rows"]] == [2, 2, 2, 2], seeded["rows"]
    assert seeded["sampling"]["temperature"] == 0.8 and seeded["sampling"]["seed"] == 7
    pair = open_pair(target, draft, opts)
    sampled, greedy = Bench(pair, 16, SamplingParams(0.8, seed=7)), Bench(pair, 16)
    toks = sampled.prompt_tokens(prompts[0])
    one = sampled.generate("plain", None, prompts[0], toks, 24).tokens
    assert one == sampled.generate("auto", None, prompts[0], toks, 24).tokens
    assert one != greedy.generate("plain", None, prompts[0], toks, 24).tokens


def test_bench_samples_only_with_a_seed_and_never_the_peer(capsys, tiny_pair):
    target, draft = tiny_pair
    base = ["bench", "--target", str(target), "--draft", str(draft), "--max-tokens", "4"]
    assert main([*base, "--methods", "plain,auto", "--temperature", "0.7"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("bench samples only with a seed: add --seed N to --temperature")
    )
    assert main([*base, "--methods", f"plain,{PEER}", "--temperature", "0.7", "--seed", "1"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(f"method {PEER} is benchmarked greedy only; drop it or --temperature")
    )


def test_an_answer_that_runs_past_plains_end_gets_the_gap_at_that_end(tiny_runtimes):
    """Plain stopped where the other went on: the departure is at plain's last token, and its
    top-two gap (end of generation against the other's token) says whether that was a tie."""
    from types import SimpleNamespace

    from edgespec.app.bench_runs import Bench, top2_gap
    from edgespec.engine import Result, Stats

    target, _ = tiny_runtimes
    toks = target.tokenize("def add(a, b):", special=True)
    plain = Result("", [5, 17, 42], "stop", Stats(n_generated=3))
    longer = Result("", [5, 17, 42, 99], "length", Stats(n_generated=4))
    bench = SimpleNamespace(target=target, near_tie=1e9)
    run = Bench.compare(bench, prompt("a-1", "x"), toks, longer, plain)  # type: ignore[arg-type]
    assert (run.identical, run.departure) == (False, 3)
    assert run.departure_gap == top2_gap(target, toks + [5, 17, 42])
    assert run.near_tie is True


def test_bench_gives_auto_the_draft_confidence_asked_for(tiny_pair, capsys):
    pytest.importorskip("llama_cpp")
    from edgespec.app.bench_runs import Bench
    from edgespec.errors import EdgespecError
    from edgespec.pair import open_pair

    pair = open_pair(*tiny_pair, RuntimeOptions(n_ctx=256, n_threads=1))
    for confidence in (0.0, 0.55):
        assert Bench(pair, draft_confidence=confidence).decoder.drafters["model"].confidence == (
            confidence
        )
    with pytest.raises(EdgespecError, match=r"--draft-confidence must be in \[0, 1\)"):
        Bench(pair, draft_confidence=1.0)


def test_a_base_model_is_benched_on_raw_text(capsys, tmp_path):
    """No chat template: a raw-text suite runs, each prompt tokenized as `run` tokenizes it."""
    pytest.importorskip("llama_cpp")
    from edgespec.app.bench_runs import Bench
    from edgespec.pair import open_pair
    from tests.tiny_gguf import TinyConfig, random_weights, vocabulary, write_gguf

    cfg = TinyConfig()
    weights = random_weights(cfg, len(vocabulary()[0]), 3)
    base = write_gguf(tmp_path / "base.gguf", cfg, weights, chat_template=None, add_bos=True)
    suite = tmp_path / "raw.jsonl"
    lines = [{"id": f"story-{i}", "prompt": f"the {i} the the"} for i in (1, 2)]
    suite.write_text("\n".join(json.dumps(x) for x in lines))
    code = main(["bench", "--target", str(base), "--suite", str(suite), "--methods",
                 "plain,ngram", "--k", "2", "--max-tokens", "4", "--threads", "1", "--n-ctx",
                 "256"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    bench = Bench(open_pair(base, None, RuntimeOptions(n_ctx=256)))
    raw = load_suite(str(suite))[0]
    assert bench.prompt_tokens(raw) == bench.target.tokenize("the 1 the the", special=True)
    assert bench.prompt_tokens(raw)[0] == bench.target.vocab_info().bos_id
