"""bench/replay.py: the replay target answers with the recording, the real loop reproduces it,
and every pass is charged by the curve (hand-made recordings; the real one is a bench run)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from edgespec.chat import chat_tokens
from edgespec.controller import Learned
from edgespec.controller.acceptance import ByPosition
from edgespec.controller.lessons import LessonStore
from edgespec.loader import DRAFT_CONFIDENCE, SpecOptions
from tests.bench_scripts import REPO, load_bench_script

FLAT = [1.0] * 17
# ONNX Runtime's demo bundle on the 2-core AVX-512 Xeon: t(n) / t(1), n = 1..17
XEON_ONNX = [1.0, 1.14, 1.42, 1.54, 1.79, 1.94, 2.17, 2.3, 2.54, 2.71, 3.01, 3.08, 3.35, 3.42,
             3.64, 3.85, 4.21]  # fmt: skip
SPEC = SpecOptions("ngram", None, 16)


def load_module():
    return load_bench_script("replay.py", "bench_replay")


def case(prompt: list[int], output: list[int], stop: bool = True) -> dict:
    eog = 999
    return {"suite": "s", "id": "c-01", "category": "c", "prompt": prompt, "eog": eog,
            "output": output + ([eog] if stop else [])}  # fmt: skip


def test_each_row_names_the_recorded_next_token_and_the_end_after_it():
    replay = load_module()
    target = replay.ReplayTarget([50, 60, 70], [80, 60, 999], eog=999)
    assert target.prompt == [1, 2, 3] and target.output == [4, 2, 0]  # dense; the end is 0
    rows = target.forward(target.prompt)
    assert rows.argmax(axis=1).tolist() == [2, 3, 4]
    assert target.passes == []  # the prompt's pass is not charged
    wrong_draft = target.forward([4, 3, 3])  # rows follow positions, whatever was fed
    assert wrong_draft.argmax(axis=1).tolist() == [2, 0, 0]
    assert target.passes == [3]
    target.rollback(3)
    assert target.forward([4], last_only=True).argmax(axis=1).tolist() == [2]


def test_text_without_repeats_costs_exactly_plain_decoding():
    replay = load_module()
    row = replay.replay_case(case(list(range(10, 40)), list(range(40, 70))), FLAT, SPEC)
    assert (row["tokens"], row["cost"], row["speedup"], row["n_drafts"]) == (31, 31.0, 1.0, 0)


def test_a_copied_passage_is_drafted_and_charged_by_the_curve():
    replay = load_module()
    passage = [int(t) for t in np.random.default_rng(0).permutation(500)[:120] + 1000]
    recorded = case([7, *passage, 8], passage)
    flat = replay.replay_case(recorded, FLAT, SPEC)  # no output departs: replay_case checks
    # 121 tokens in 9 passes: the first copied token plain (no match yet), 7 x (16 drafted
    # + 1), the stop token; the oracle, which knows what is accepted, does no better
    assert (flat["tokens"], flat["cost"], flat["n_accepted"]) == (121, 9.0, 112)
    assert replay.replay_case(recorded, FLAT, SPEC, "oracle")["cost"] == 9.0
    # the policy learns its curve from what each pass was charged, not the loop's microseconds
    cpu_like = replay.replay_case(recorded, [1 + 0.3 * n for n in range(17)], SPEC)
    assert cpu_like["n_accepted"] >= 100 and cpu_like["speedup"] > 2.0
    steep = replay.replay_case(recorded, [float(n) for n in range(1, 18)], SPEC)
    # a pass of n tokens costs n: drafting cannot beat one token per pass, and must not lose
    assert steep["speedup"] == pytest.approx(1.0, abs=0.01)


def test_a_replay_that_departs_from_its_recording_is_an_error(monkeypatch):
    replay = load_module()
    monkeypatch.setattr(replay.ReplayTarget, "forward", lambda self, tokens, last_only=False:
                        np.eye(self.n_vocab, dtype=np.float32)[[1] * len(tokens)])  # fmt: skip
    with pytest.raises(AssertionError, match="c-01: the replay departed from the recording"):
        replay.replay_case(case([5, 6], [7, 8]), FLAT, SPEC)


def test_curves_are_named_or_given_inline_and_bad_ones_are_refused():
    replay = load_module()
    curves = replay.load_curves(["gpu-assumed", "mine=1,1.1,1.3"])
    assert curves["mine"] == [1.0, 1.1, 1.3] and curves["gpu-assumed"][:2] == [1.0, 1.02]
    with pytest.raises(SystemExit, match="unknown curve 'h100': .*replay_curves.json has"):
        replay.load_curves(["h100"])
    with pytest.raises(SystemExit, match=r"curve bad: give t\(n\)/t\(1\) for n = 1, 2, ..."):
        replay.load_curves(["bad=2,3"])


def test_bad_suite_options_are_refused_with_the_form_to_use():
    replay = load_module()
    assert replay.parse_suites("edit=256,open") == {"edit": 256, "open": 128}
    for bad in ("edit=lots", "edit=0"):
        with pytest.raises(SystemExit, match=f"--suites {bad}: give SUITE or SUITE=MAX_TOKENS"):
            replay.parse_suites(bad)


# --- the draft model, as recorded -----------------------------------------------------------


def unrepeated(n: int, seed: int = 0) -> list[int]:
    """n distinct tokens: text prompt lookup finds nothing in."""
    return [int(t) for t in np.random.default_rng(seed).permutation(5000)[:n] + 1000]


def drafted_case(output: list[int], draft: list[int]) -> dict:
    recorded = case([7, 8, 9], output)
    recorded["draft"] = draft + [recorded["eog"]]  # at the stop token's position: the stop
    return recorded


def test_the_draft_model_proposes_its_recorded_token_at_each_output_position():
    replay = load_module()
    target = replay.ReplayTarget([50, 60], [70, 80, 999], eog=999, draft=[70, 55, 999])
    assert target.draft == [3, 5, 0]  # numbered with the target's ids; 55 is new
    clock = replay.Clock([1.0, 1.5, 2.0])
    draft = replay.ReplayDraft(target, clock, ratio=0.25)
    assert draft.forward([1], last_only=True).argmax(axis=1).tolist() == [0]  # inside the prompt
    clock.running = True
    assert draft.forward([2, 3]).argmax(axis=1).tolist() == [3, 5]  # at outputs 0 and 1
    assert clock.now == 0.25 * 1.5  # a 2-token pass at a quarter of the target's price
    draft.rollback(2)
    assert draft.forward([2, 9, 9], last_only=True).argmax(axis=1).tolist() == [0]


def test_a_perfect_draft_model_at_k_1_halves_the_passes_and_pays_its_price():
    replay = load_module()
    output = unrepeated(30)
    perfect = drafted_case(output, output)
    row = replay.replay_case(perfect, FLAT, SPEC, "model=1", draft_ratio=0.5)
    # 31 tokens (the stop's too): 15 steps of a drafted token and the target's next (each a
    # draft pass at 0.5 and a verify pass at 1), then the last token plainly (no room)
    assert (row["tokens"], row["n_accepted"], row["model_steps"]) == (31, 15, 15)
    assert row["cost"] == 15 * 1.5 + 1
    wrong = drafted_case(output, [t + 1 for t in output])  # never the target's token
    row = replay.replay_case(wrong, FLAT, SPEC, "model=1", draft_ratio=0.5)
    assert (row["n_accepted"], row["cost"]) == (0, 30 * 1.5 + 1)


def test_a_cut_draft_is_wrong_where_the_target_emits_an_id_it_dropped():
    """--draft-vocab N: right predictions of ids >= N become wrong ones; the stop token, ids
    below N and predictions that were wrong anyway stay as recorded."""
    replay = load_module()
    recorded = drafted_case([10, 2000, 20, 3000], [10, 2000, 21, 2999])
    replay.cut_draft({"cases": [recorded]}, keep=1000)
    assert recorded["draft"] == [10, 2001, 21, 2999, 999]
    row = replay.replay_case(recorded, FLAT, SPEC, "model=1", draft_ratio=0.5)
    assert row["n_accepted"] == 1  # only 10 is still drafted right


def test_the_controller_drafts_with_a_good_draft_model_and_drops_a_bad_one():
    replay = load_module()
    output = unrepeated(120)
    cpu = XEON_ONNX
    good = drafted_case(output, output)
    auto = replay.replay_case(good, cpu, SPEC, "auto", draft_ratio=0.34)
    # k grows as its drafts are kept: 120 tokens in under 30 steps
    assert auto["n_accepted"] > 90 and auto["model_steps"] < 30 and auto["speedup"] > 1.5
    oracle = replay.replay_case(good, cpu, SPEC, "oracle", draft_ratio=0.34)
    assert oracle["speedup"] >= auto["speedup"]  # it knows every draft will be kept
    bad = drafted_case(output, [t + 1 for t in output])
    auto = replay.replay_case(bad, cpu, SPEC, "auto", draft_ratio=0.34)
    assert auto["n_drafts"] <= 5 and auto["speedup"] > 0.98  # it stops drafting
    assert replay.replay_case(bad, cpu, SPEC, "oracle", draft_ratio=0.34)["speedup"] == 1.0
    # without draft_ratio the recording's draft is ignored: prompt lookup alone
    alone = replay.replay_case(good, cpu, SPEC, "auto")
    assert (alone["model_steps"], alone["speedup"]) == (0, 1.0)


def test_a_suite_carries_what_the_controller_learned_from_one_prompt_to_the_next(monkeypatch):
    """replay_suite hands each case what the cases before it in its suite taught the
    controller of each drafter, price and acceptance (AdaptivePolicy keeps both across
    requests); a new suite starts from the drafters' own."""
    replay = load_module()
    output = unrepeated(120)
    good = drafted_case(output, output)
    first = replay.replay_case(good, XEON_ONNX, SPEC, "auto", draft_ratio=0.34)
    assert first["model_steps"] > 0 and first["draft_price"] not in (None, 0.34)
    dear = Learned(10.0, True, ByPosition())
    priced_out = replay.replay_case(
        good, XEON_ONNX, SPEC, "auto", draft_ratio=0.34, learned={"model": dear}
    )
    assert priced_out["model_steps"] == 0  # the price it starts at decides, not draft_ratio
    learned: dict = {}
    again = replay.replay_case(good, XEON_ONNX, SPEC, "auto", draft_ratio=0.34, learned=learned)
    assert again == first
    assert learned["model"].token_s == first["draft_price"]
    assert learned["model"].acceptance.sure_tally.seen > 0 and "ngram" in learned
    started_from = []
    real = replay.replay_case

    def spy(case, *args, learned, **kwargs):
        known = learned.get("model")
        started_from.append(known and (known.token_s, known.acceptance.sure_tally.seen))
        return real(case, *args, learned=learned, **kwargs)

    monkeypatch.setattr(replay, "replay_case", spy)
    other_suite = {**good, "suite": "t"}
    rows = replay.replay_suite([good, good, other_suite], XEON_ONNX, SPEC, "auto", draft_ratio=0.34)
    assert started_from[0] is None and started_from[2] is None
    assert started_from[1] == (rows[0]["draft_price"], learned["model"].acceptance.sure_tally.seen)
    assert rows[0] == first
    started_from.clear()  # --fresh: every case from the drafters' own, as a new process's
    fresh = replay.replay_suite([good, good], XEON_ONNX, SPEC, "auto", draft_ratio=0.34,
                                fresh=True)  # fmt: skip
    assert started_from == [None, None] and fresh == [first, first]
    # prompt lookup alone, or a fixed policy: no price to carry
    assert real(good, XEON_ONNX, SPEC, "auto")["draft_price"] is None
    assert real(good, XEON_ONNX, SPEC, "model=1", draft_ratio=0.34)["draft_price"] is None


def test_fixed_policies_are_named_drafter_and_k():
    replay = load_module()
    assert replay.parse_fixed("model=2") == ("model", 2)
    for bad in ("model", "model=0", "lookup=2", "ngram=x"):
        with pytest.raises(SystemExit, match=f"--policies {bad}: give auto, oracle, model=K"):
            replay.parse_fixed(bad)


def test_teacher_forced_predictions_of_a_real_model_on_its_own_output_are_that_output(
    tiny_runtimes,
):
    """A model's greedy token at each position of its own greedy output is that output's
    next token: the recording's predictions come from the real draft runtime, row for row."""
    replay = load_module()
    _, draft = tiny_runtimes
    prompt = chat_tokens(draft, [{"role": "user", "content": "the theme of the week"}])
    draft.reset()
    logits = draft.forward(prompt, last_only=True)[-1]
    own = []
    for _ in range(70):  # more than one 64-token chunk
        own.append(int(np.argmax(logits)))
        logits = draft.forward([own[-1]], last_only=True)[-1]
    tokens, probs = replay.teacher_forced(draft, prompt, own)
    assert tokens == own
    assert len(probs) == 70 and all(0.0 < p <= 1.0 for p in probs)
    assert draft.n_past == 0  # left reset


def test_recorded_curves_and_confidence_follow_the_recording_and_edgespec():
    replay = load_module()
    assert replay.load_curves(["recorded"], [1.0, 1.2]) == {"recorded": [1.0, 1.2]}
    with pytest.raises(SystemExit, match="curve recorded: this recording has no calibration"):
        replay.load_curves(["recorded"])
    assert replay.confidence_for("auto") == DRAFT_CONFIDENCE
    assert replay.confidence_for("model=4") == replay.confidence_for("oracle") == 0


def test_one_graph_charges_a_changed_shape_and_its_capture():
    """ggml-cuda's one graph (--one-graph): a pass whose shape changed runs uncaptured, the
    next like it captures; both pay the surcharge, replays none."""
    replay = load_module()
    graph = replay.OneGraph(1.5)
    shapes = [(9, 1), (1, 1), (1, 1), (1, 1), (3, 3), (1, 1), (3, 3), (3, 3), (3, 3), (3, 1)]
    assert [graph.surcharge(s) for s in shapes] == [1.5, 1.5, 1.5, 0, 1.5, 1.5, 1.5, 1.5, 0, 1.5]


def test_on_one_graph_plain_decoding_pays_two_switches_and_drafting_pays_its_own():
    replay = load_module()
    no_repeats = case(list(range(10, 40)), list(range(40, 70)))
    row = replay.replay_case(no_repeats, FLAT, SPEC, one_graph=(1.0, 0.5))
    # the prompt's pass leaves another shape: the first plain pass uncaptured, the second
    # captures; auto drafts nothing here and pays as plain decoding does
    assert (row["plain_cost"], row["cost"], row["speedup"]) == (33.0, 33.0, 1.0)
    output = unrepeated(30)
    perfect = drafted_case(output, output)
    row = replay.replay_case(perfect, FLAT, SPEC, "model=3", draft_ratio=0.5, one_graph=(1.0, 1.0))
    # the draft forwards one token a pass and replays its graph
    assert (row["n_accepted"], row["cost"]) == (23, 28.0)


def test_a_gpu_kit_run_is_read_as_replayed_passes_with_its_switch(tmp_path):
    """--kit: the kit's curve alternates widths, so on a one-graph target (switch_ms) every
    pass ran uncaptured: the replay takes the switch off, in replayed one-token passes."""
    replay = load_module()
    run = {"label": "demo", "backend": "llama", "device": "cuda", "curve_ms": [3.0, 4.0, 5.0],
           "draft_token_ms": 0.5, "switch_ms": 2.0}  # fmt: skip
    path = tmp_path / "kit.json"
    path.write_text(json.dumps(run))
    kit = replay.kit_run(str(path))
    assert (kit.name, kit.ratios, kit.draft_ratio, kit.one_graph) == (
        "demo-llama-cuda",
        [1.0, 2.0, 3.0],
        0.5,
        (2.0, 2.0),
    )
    path.write_text(json.dumps({**run, "switch_ms": 0.0, "draft_token_ms": 0.0}))
    kit = replay.kit_run(str(path))
    assert (kit.ratios, kit.draft_ratio, kit.one_graph) == ([1.0, 1.3333, 1.6667], None, None)
    assert kit.confidence_ratio == 0.0  # not measured


def test_auto_is_replayed_with_its_draft_confidence_priced_and_fixed_k_without(tmp_path):
    """The kit prices a draft token without the confidence `auto` drafts with (on llama.cpp
    an exp and a sum over the vocabulary on the host) and measures that apart
    (draft_confidence): the replay adds it to auto's draft price, not to a fixed k's or the
    oracle's, which draft without one."""
    replay = load_module()
    run = {"label": "demo", "backend": "llama", "device": "cuda", "curve_ms": [2.0, 2.5],
           "draft_token_ms": 0.6, "draft_confidence": {"confidence_ms": 0.1}}  # fmt: skip
    path = tmp_path / "kit.json"
    path.write_text(json.dumps(run))
    kit = replay.kit_run(str(path))
    assert (kit.draft_ratio, kit.confidence_ratio) == (0.3, 0.05)
    assert replay.policy_draft_ratio("auto", 0.3, kit) == pytest.approx(0.35)
    for policy in ("model=3", "oracle", "llama-server"):
        assert replay.policy_draft_ratio(policy, 0.3, kit) == 0.3
    assert replay.policy_draft_ratio("auto", None, kit) is None  # no draft model


@pytest.mark.parametrize(
    "policy, drafted, accepted",
    [
        # draft-max 3 (the vendored llama.cpp's default): 3 kept + bonus; 3 with the 6th
        # wrong (1 kept, the 6th recovered); 3 kept + bonus; then 1 token of room: plain
        ("llama-server", (3, 9), 7),
        # draft-max 8: 8 with the 6th wrong (5 kept); then room for 5 tokens: 4 + the stop
        ("llama-server=8", (2, 12), 9),
    ],
)
def test_llama_servers_draft_mode_drafts_draft_max_every_step_capped_by_the_room(
    policy, drafted, accepted
):
    replay = load_module()
    output = unrepeated(10)
    draft = list(output)
    draft[5] += 1  # the draft model is wrong at output position 5 only
    row = replay.replay_case(drafted_case(output, draft), FLAT, SPEC, policy, draft_ratio=0.5)
    assert (row["n_drafts"], row["n_draft_tokens"]) == drafted
    assert row["n_accepted"] == accepted
    assert row["model_steps"] == drafted[0]  # no prompt lookup beside the draft model


def test_llama_server_policy_names_are_checked():
    replay = load_module()
    assert replay.LLAMA_SERVER_DRAFT == {"n_max": 3, "n_min": 0, "p_min": 0.0}
    for bad in ("llama-server=0", "llama-server=x"):
        with pytest.raises(SystemExit, match="llama-server=N"):
            replay.llama_server_policy(bad)


def test_the_grid_replay_reproduces_the_kit_and_auto_drafts_from_its_first_steps():
    """bench/replay_grid.py on the H100 llama.cpp kit run (its curve and one-graph switch):
    fixed k = 7 at acceptance 1.0 takes 16 steps for 128 tokens, as on the H100; a fresh
    `auto` took 39 there (and here, before the cold-start fixes), then 19, now 16 (its first
    probe drafts the 7 that would pay most at 0.9, and keeps all); with the real draft price
    (0.68 of a target token, which cannot pay) it never drafts, so equals plain."""
    grid = load_bench_script("replay_grid.py", "bench_replay_grid")
    h100 = REPO / "docs/results/gpu-h100-2026-11-26"
    kit = grid.replay.kit_run(str(h100 / "demo-llama-graphs-on.json"))
    assert grid.run_one(kit, 1.0, 128, "7", False)["steps"] == 16
    assert grid.run_one(kit, 1.0, 128, "auto", False)["steps"] == 16
    real = grid.run_one(kit, 0.9, 128, "auto", True)
    assert (real["speedup"], real["drafted"]) == (1.0, 0)


def test_the_grid_replay_prices_a_head_at_a_given_ratio_and_rates(tmp_path, capsys):
    """--draft-ratio replaces the kit's draft price (a head's), --acceptance the kit's rates:
    on the H200 7B curve a drafter at 0.1 of a target token kept 20% of the time."""
    grid = load_bench_script("replay_grid.py", "bench_replay_grid")
    kit = REPO / "docs/results/gpu-h200-2026-11-26/7b-llama-graphs-on.json"
    out = tmp_path / "grid.json"
    grid.main(["--kit", str(kit), "--draft-ratio", "0.1", "--acceptance", "0.2",
               "--json", str(out)])  # fmt: skip
    assert "7b-llama-cuda: draft 0.1 one-token passes" in capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert [(r["draft_cost"], r["acceptance"]) for r in rows] == [("zero", 0.2), ("real", 0.2)]
    cheaper = grid.run_one(replace(grid.replay.kit_run(str(kit)), draft_ratio=0.1), 0.2, 128,
                           "1", True)  # fmt: skip
    assert rows[1]["fixed"]["1"] == cheaper["speedup"]


def test_the_grid_replay_takes_a_stored_cpu_curve(capsys):
    """--curve: a curve of bench/replay_curves.json (no one graph, no draft price of its own)."""
    grid = load_bench_script("replay_grid.py", "bench_replay_grid")
    grid.main(["--curve", "onnx-cpu", "--draft-ratio", "0.1", "--acceptance", "1.0"])
    assert "onnx-cpu: draft 0.1 one-token passes, one graph None" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="^--curve nope: not in replay_curves.json \\(llama-cpu, "):
        grid.main(["--curve", "nope"])


def test_the_grid_replay_averages_realizations_of_the_wrong_positions():
    """--seeds 2: each figure the mean of realizations 0 (the kit's) and 1, the worst kept."""
    grid = load_bench_script("replay_grid.py", "bench_replay_grid")
    kit = grid.replay.kit_run(
        str(REPO / "docs/results/gpu-h100-2026-11-26/demo-llama-graphs-on.json")
    )
    one, two = (grid.run_one(kit, 0.6, 128, "auto", False, seed=s) for s in (0, 1))
    assert one["speedup"] != two["speedup"]
    mean = grid.run_mean(kit, 0.6, 128, "auto", False, seeds=2)
    assert mean["speedup"] == round((one["speedup"] + two["speedup"]) / 2, 4)
    assert mean["worst"] == min(one["speedup"], two["speedup"])
    assert grid.run_mean(kit, 0.6, 128, "auto", False, seeds=1) == one


def test_in_the_grid_replay_later_requests_start_from_what_the_first_learned(capsys):
    """--requests: generations in a row on one policy, as a server serves them. The H200's
    fp16 ONNX pair at its real draft price pays only when always right (fixed k = 8: 1.29x):
    a first request finds that out (1.23x), and the two after it draft from their start
    (1.27x), where with the prior counting as 100 tokens they started the draft model at
    0.81 and never drafted (1.00x). On the H200 7B curve a draft model kept 20% of the time
    loses: what the first request's probes learned keeps later probes' loss near 1% (0.987x;
    0.963x at 100)."""
    grid = load_bench_script("replay_grid.py", "bench_replay_grid")
    h200 = REPO / "docs/results/gpu-h200-2026-11-26"
    onnx = grid.replay.kit_run(str(h200 / "demo-fp16-onnx-graphs-on.json"))
    auto = grid.run_one(onnx, 1.0, 128, "auto", True, requests=3)
    assert (auto["speedup"], auto["later"]) == (1.234, 1.2662)
    assert grid.run_one(onnx, 1.0, 128, "8", True, requests=3)["later"] == 1.2926
    assert "later" not in grid.run_one(onnx, 1.0, 128, "auto", True)
    b7 = grid.replay.kit_run(str(h200 / "7b-llama-graphs-on.json"))
    assert grid.run_one(b7, 0.2, 128, "auto", True, requests=3)["later"] == 0.9873
    grid.main(["--kit", str(h200 / "demo-fp16-onnx-graphs-on.json"), "--acceptance", "1.0",
               "--requests", "2"])  # fmt: skip
    out = capsys.readouterr().out
    assert "| auto steps | later: best fixed k | auto | auto / best |" in out
    assert "| 128 | real | 1.0 | k=8 1.293x | 1.234x | 0.955 | 26 | k=8 1.293x |" in out
    with pytest.raises(SystemExit, match="^--requests 0: give 1 or more$"):
        grid.main(["--kit", str(h200 / "7b-llama-graphs-on.json"), "--requests", "0"])


def test_in_the_grid_replay_auto_moves_to_the_width_that_repays_its_switch():
    """At acceptance 0.9 over 1024 tokens on the H100 llama.cpp kit, k = 7 pays 2.46x, k = 4
    2.28x; each step charged its whole switch, `auto` stayed at k = 4 (279 steps); rent-or-buy
    takes k = 7 once staying has cost a switch (207 steps; 189 since leaving plain pays its
    capture up front, LEAVE_PLAIN_SWITCHES; fixed k = 7 takes 185). 215 since a probe drafts
    7: the first is wrong at its first token here, and the probes back off for 32 steps."""
    grid = load_bench_script("replay_grid.py", "bench_replay_grid")
    kit = grid.replay.kit_run(
        str(REPO / "docs/results/gpu-h100-2026-11-26/demo-llama-graphs-on.json")
    )
    assert grid.run_one(kit, 0.9, 1024, "7", False)["steps"] == 185
    assert grid.run_one(kit, 0.9, 1024, "auto", False)["steps"] == 215


def test_foresight_prices_the_one_graph_as_the_controller_does_and_the_draft_as_charged():
    """The oracle's verify passes carry the target graph's switch (leaving plain: its own and
    the two plain passes back; plain never), and a draft model's proposal costs what the
    clock charges its passes, its catch-up pass's switches included."""
    replay = load_module()
    output = unrepeated(30)
    target = replay.ReplayTarget([7, 8, 9], output + [999], eog=999, draft=output + [999])
    clock = replay.Clock([1.0, 1.2, 1.4, 1.6, 1.8], one_graph=(0.5, 0.25))
    target.clock, target.keeps_one_graph = clock, True
    [model, _] = replay.replay_drafters(target, SPEC, 0.5, 0.0)
    oracle = replay.OraclePolicy(target, clock.ratios, 4)
    graph = clock.graphs["target"]
    graph.surcharge((1, 1)), graph.surcharge((1, 1))  # plain, captured
    assert [oracle.switch(w) for w in (1, 2, 3)] == [0.0, 1.5, 1.5]
    graph.surcharge((3, 3))
    assert graph.would_charge((3, 3)) == 0.5 and graph.shape == (3, 3)  # read, not taken
    assert [oracle.switch(w) for w in (1, 2, 3)] == [0.0, 0.5, 0.5]
    graph.surcharge((3, 3))
    assert [oracle.switch(w) for w in (1, 2, 3)] == [0.0, 0.5, 0.0]
    context = target.prompt + target.output[:5]  # the draft model's cache empty: 8 behind
    predicted = oracle.draft_s(model, context, 3)
    clock.running = True
    model.propose(context, 3, replay.SamplingParams())
    # 7 tokens caught up in a pass of their own (t(7) = 2.2 past the curve), then a token a
    # pass, at half the target's price; each shape change and the capture after it 0.25
    assert predicted[-1] == pytest.approx(clock.now)
    assert predicted == pytest.approx([1.1 + 0.25 + 0.5 + 0.25, 2.1 + 0.5 + 0.25, 2.85 + 0.5])


def test_a_process_per_request_with_its_lessons_stored_replays_as_one_process(
    tmp_path, monkeypatch
):
    """Each case of a suite replayed as a new process that recalls only what lessons.json
    keeps (each drafter's counts, judged tokens and its first token's price relative to its
    others') runs as the carried replay does, step for step, where the draft model's price
    holds (the H100's 1.5B curve): the store loses nothing the next request starts from.
    From the priors (--fresh) the same cases run otherwise. (Where a learned price drifts
    from the calibration's, which each process starts from, the suites differ: on the H200
    7B curve open -0.2%, code -0.04%, chat +0.4%, edit +2.8%.)"""
    replay = load_module()
    recording = json.loads((REPO / "docs/results/s10-replay-record-onnx-xeon.json").read_text())
    cases = [c for c in recording["cases"] if c["suite"] == "code"][:6]
    kit = replay.kit_run(str(REPO / "docs/results/gpu-h100-2026-11-26/demo-llama-graphs-on.json"))
    args = (cases, kit.ratios, SPEC, "auto", kit.draft_ratio, replay.confidence_for("auto"))
    carried = replay.replay_suite(*args, one_graph=kit.one_graph)
    fresh = replay.replay_suite(*args, one_graph=kit.one_graph, fresh=True)
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    store = replay.AdaptivePolicy  # each case's policy: a new process's, with the store
    monkeypatch.setattr(replay, "make_policy", lambda spec, drafters, curve: store(
        curve, k_max=spec.k_max, store=LessonStore("replay")))  # fmt: skip
    stored = replay.replay_suite(*args, one_graph=kit.one_graph, fresh=True)
    assert [r["cost"] for r in stored] == [r["cost"] for r in carried]
    assert [r["cost"] for r in fresh] != [r["cost"] for r in carried]
