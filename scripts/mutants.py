"""Deliberate bugs, one at a time: each must make at least one fast test fail.

Every mutant names the definition it breaks and a snippet inside it: `where` is the qualified
name of a def or class (`verify_greedy`, `AdaptivePolicy.plan`, a nested `outer.inner`) or of
a module-level assignment (`STAY_MARGIN`), found by parsing every module of the packages
(pyproject's package-dir), whichever file defines it; `old` must occur exactly once in that
definition's source (its whole lines, decorators included) and is replaced by `new`. Where a
qualified name is defined in more than one module, `where` is prefixed with the end of the
module's dotted name and a colon: `llamacpp:top_of` or `runtimes.llamacpp:top_of`. So moving a
function to another file needs no change here; renaming it, or rewriting the snippet, does.

A mutant is applied to a scratch copy of the package (laid out as pyproject's package-dir
installs it, imported through PYTHONPATH ahead of the editable install), so the working tree
is never changed, whatever stops the run. An anchor that no longer resolves stops the run
before any test, each one reported: re-anchor it here.

    python scripts/mutants.py [NAME ...]   # all mutants, or the named ones
    python scripts/mutants.py --list
    python scripts/mutants.py --check      # only report the anchors that do not resolve
    python scripts/mutants.py --every rollback-off-by-one   # name every test it fails

Exit status: 0 every mutant killed (with --check: every anchor resolves), 1 some survived,
2 the mutants or the baseline are broken.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
# per mutant (EDGESPEC_MUTANT_TIME_LIMIT_S on a loaded machine); a mutant that hangs the tests
# counts as killed
TIME_LIMIT_S = int(os.environ.get("EDGESPEC_MUTANT_TIME_LIMIT_S", "300"))
PYTEST = ["-q", "-p", "no:cacheprovider", "-rf", "-m", "not real and not gpu and not slow"]
ENGINE, VERIFY = "tests/test_engine.py", "tests/test_verify.py"
SAMPLING = "tests/test_sampling.py"
HEAD = "tests/test_sampling_head.py"
TOP = "tests/test_top_outputs.py"
BACKEND_SAMPLING = "tests/test_backend_sampling.py"


@dataclass(frozen=True)
class Mutant:
    name: str
    where: str  # the definition it breaks: [MODULE:]QUALNAME (see the module docstring)
    old: str  # snippet found exactly once inside that definition
    new: str
    tests: tuple[str, ...]  # the fast tests that should kill it


@dataclass(frozen=True)
class Definition:
    module: str  # dotted import name, e.g. edgespec.runtimes.llamacpp
    qualname: str  # e.g. LlamaCppRuntime.forward_dists, or a module-level NAME
    path: str  # relative to the repository root
    start: int  # character offsets of its whole lines (decorators included) in the file
    end: int


MUTANTS = (
    Mutant(
        "residual-ignores-q",
        "residual",
        "r = np.maximum(p - q, 0.0)",
        "r = np.maximum(p, 0.0)",
        (VERIFY, ENGINE),
    ),
    Mutant(
        "residual-keeps-rejected-token",
        "residual",
        "        r[x] = 0.0\n",
        "        pass\n",
        (VERIFY, ENGINE),
    ),
    Mutant(  # the same two bugs on the sparse path (top-k / top-p / min-p supports)
        "sparse-residual-ignores-q",
        "residual_dist",
        "r = np.maximum(p.probs - q[p.ids], 0.0)",
        "r = np.maximum(p.probs, 0.0)",
        (VERIFY, "tests/test_sampling_fast.py"),
    ),
    Mutant(
        "sparse-residual-keeps-rejected-token",
        "residual_dist",
        "r = np.where(p.ids == x, np.float32(0.0), p.probs)",
        "r = p.probs.copy()",
        (VERIFY, "tests/test_sampling_fast.py"),
    ),
    Mutant(
        "rollback-off-by-one",
        "SpeculativeDecoder.step",
        "self.target.rollback(n0 + 1 + verdict.n_accepted)",
        "self.target.rollback(n0 + verdict.n_accepted)",
        (ENGINE,),
    ),
    Mutant(
        "bonus-token-skipped",
        "verify_greedy",
        "return Verdict(n_accepted, argmax[: n_accepted + 1])",
        "return Verdict(n_accepted, argmax[: min(n_accepted + 1, max(k, 1))])",
        (VERIFY, ENGINE),
    ),
    Mutant(
        "greedy-accepts-past-mismatch",
        "verify_greedy",
        "n_accepted = int(mismatch[0]) if mismatch.size else k",
        "n_accepted = int(mismatch[0]) + 1 if mismatch.size else k",
        (VERIFY, ENGINE),
    ),
    Mutant(
        "q-before-top-p-token-after",
        "ModelDrafter.propose",
        "q[i] = dist.dense(n_vocab)\n                    tokens[i] = dist.sample(self.rng)",
        "q[i] = token_dist(scores, SamplingParams(sp.temperature, sp.top_k)).on_ids("
        "self.columns).dense(n_vocab)\n                    tokens[i] = dist.sample(self.rng)",
        (ENGINE,),
    ),
    Mutant(
        "q-after-top-p-token-before",
        "ModelDrafter.propose",
        "q[i] = dist.dense(n_vocab)\n                    tokens[i] = dist.sample(self.rng)",
        "q[i] = dist.dense(n_vocab)\n                    tokens[i] = token_dist(scores, "
        "SamplingParams(sp.temperature, sp.top_k)).on_ids(self.columns).sample(self.rng)",
        (ENGINE,),
    ),
    Mutant(
        "stop-string-cut-one-late",
        "TextStream.find_stop",
        "return min(hits) if hits else None",
        "return min(hits) + 1 if hits else None",
        (ENGINE,),
    ),
    Mutant(  # positions >= 1 only: the first token's law cannot see it
        "residual-without-q-after-first",
        "verify_stochastic",
        "recovered = residual_dist(p_i, None if q is None else q[i], x)",
        "recovered = residual_dist(p_i, None if q is None else q[i] * (i == 0), x)",
        (VERIFY, ENGINE),
    ),
    Mutant(
        "q-row-shifted",
        "verify_stochastic",
        "qx = 1.0 if q is None else float(q[i, x])",
        "qx = 1.0 if q is None else float(q[max(i - 1, 0), x])",
        (VERIFY, ENGINE),
    ),
    Mutant(
        "drafter-shares-verifier-stream",
        "SpeculativeDecoder.begin",
        "drafter.reset(stream_rng(sp.seed, 1 + i))",
        "drafter.reset(stream_rng(sp.seed, 0))",
        (ENGINE,),
    ),
    Mutant(
        "gumbel-same-noise-at-every-row",
        "PassRows.gumbel_maxes",
        "tokens[i] = self(i).gumbel_max(seed, position + i)",
        "tokens[i] = self(i).gumbel_max(seed, position)",
        (VERIFY, ENGINE),
    ),
    Mutant(
        "gumbel-emits-draft-at-mismatch",
        "verify_gumbel",
        "return Verdict(i, np.append(draft[:i], y).astype(np.int32))",
        "return Verdict(i, np.append(draft[:i], y if i == k else draft[i]).astype(np.int32))",
        (VERIFY, ENGINE),
    ),
    Mutant(  # the output stays exact; only acceptance falls, which a test must see
        "gumbel-drafter-noise-off-by-one",
        "ModelDrafter.propose",
        "dist.gumbel_max_margin(seed, len(context) + i)",
        "dist.gumbel_max_margin(seed, len(context) + i + 1)",
        (ENGINE,),
    ),
    Mutant(
        "plain-step-not-position-keyed",
        "judge",
        "if draft.gumbel or not len(draft.tokens):",
        "if draft.gumbel:",
        (ENGINE,),
    ),
    Mutant(
        "noise-same-for-every-token",
        "noise_at",
        "    np.multiply(x, np.uint64(GOLDEN), out=x)\n    x[:m] += token_offset",
        "    np.multiply(x, 0, out=x)\n    x[:m] += token_offset",
        (SAMPLING, ENGINE),
    ),
    Mutant(  # every token of a block below its largest uniform: no longer Exp(1)
        "noise-block-largest-not-held",
        "noise_at",
        "log_own[slot_of(ids) == holder] = 0.0",
        "log_own[slot_of(ids) == holder] *= 1.0",
        (SAMPLING,),
    ),
    Mutant(  # the race's definition uses the same weights: only the law can see it
        "scaled-row-weights-not-exponentiated",
        "scaled_weights",
        "    w -= z_max\n    return np.exp(w, out=w)",
        "    w -= z_max\n    return -w",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(
        "race-bound-by-the-first-race",
        "reach",
        "np.partition(races, places - 1)[places - 1]",
        "races.min()",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(
        "race-holders-off-the-support",
        "holder_entries",
        "    return at[ids[at] == tokens]",
        "    return at",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(
        "min-p-at-the-cut-not-left-to-the-dense-row",
        "min_p_support",
        "if np.any(np.abs(e - np.float32(min_p)) <= MIN_P_BAND * min_p):",
        "if False:",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(
        "min-p-support-cut-twice-as-high",
        "min_p_support",
        "keep = e >= np.float32(min_p)",
        "keep = e >= np.float32(2 * min_p)",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(
        "calibration-keeps-noisy-wide-passes",
        "calibrate",
        "target_s = [target_s[0]] + [max(t, target_s[0]) for t in target_s[1:]]",
        "target_s = list(target_s)",
        ("tests/test_measure_curve.py",),
    ),
    Mutant(
        "draft-cache-prefix-kept-for-a-new-list",
        "CachedTokens",
        "self._cached, self._known = tokens, None",
        "self._cached = tokens",
        ("tests/test_draft_sync.py",),
    ),
    Mutant(
        "draft-cache-prefix-for-another-context",
        "CachedTokens.common_prefix",
        "if self._known is not None and self._known[0] is context:",
        "if self._known is not None:",
        ("tests/test_draft_sync.py",),
    ),
    Mutant(
        "race-skips-every-block",
        "sparse_race_front",
        "blocks = np.flatnonzero(e_min <= reach(races, places) * p_b)",
        "blocks = np.flatnonzero(e_min < 0.0)",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # the rows' top-k bound one rank too high: fewer than k candidates
        "top-k-rows-bound-a-rank-too-high",
        "top_k_rows",
        "    at = col_max.shape[1] - k\n",
        "    at = min(col_max.shape[1] - k + 1, col_max.shape[1] - 1)\n",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # a step's rows raced at once take the first reach as final
        "rows-race-trusts-the-first-reach",
        "gumbel_max_rows",
        "    sure = widened(races[won]) <= reach_s[raced]  # none can race below the winner",
        "    sure = races[won] == races[won]",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # a step's rows raced at once hash too few of their tokens
        "rows-race-token-bound-too-tight",
        "gumbel_max_rows",
        "floor = (z + np.log(e_min[row_of, block] / reach_s[row_of]) - z_rounding(z))",
        "floor = (z + 0.5 * np.log(e_min[row_of, block] / reach_s[row_of]))",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # every row of a step drawn with the first row's noise (its rows and supports)
        "rows-race-rows-share-one-position",
        "row_noise_offsets",
        "for at in range(position, position + n)]",
        "for at in [position] * n]",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # a short request probed as a long one: its probes' losses unbounded
        "probes-beyond-the-requests-budget",
        "AdaptivePolicy.probe",
        "            if not self.budget.affords(cost_s - self.curve.target(1)):",
        "            if False:",
        ("tests/test_controller.py",),
    ),
    Mutant(  # a request's failed probes not counted against its budget
        "probe-losses-not-counted",
        "ProbeBudget.lost",
        "        self.lost_s += max(0.0, loss_s)",
        "        self.lost_s += 0.0",
        ("tests/test_controller.py",),
    ),
    Mutant(  # a trial without end while probes pay, left open by plan's own drafted steps
        "trial-without-end",
        "AdaptivePolicy.observe",
        "        e.trial = e.trial and e.judged < TRIAL_TOKENS\n",
        "",
        ("tests/test_controller.py",),
    ),
    Mutant(  # the last step's drafter left at the first estimate below plain
        "no-stay-margin",
        "AdaptivePolicy.staying",
        "        floor = (1 - STAY_MARGIN) * plain.tokens_per_second",
        "        floor = plain.tokens_per_second",
        ("tests/test_controller.py",),
    ),
    Mutant(  # the last drafter carried into the next request
        "stay-across-requests",
        "AdaptivePolicy.begin",
        "self.drafted_by = None",
        "pass",
        ("tests/test_controller.py",),
    ),
    Mutant(  # prompt lookup's first outcomes under a key learned at the smoothing alone
        "match-length-without-cold-start",
        "ByMatchLength.gain",
        "return max(self.smoothing, 1.0 / (self.cold_weight + (tally.seen",
        "return max(self.smoothing, 0.0 / (self.cold_weight + (tally.seen",
        ("tests/test_controller.py",),
    ),
    Mutant(  # a later request's start held near the draft model's prior, as before
        "later-requests-near-the-prior",
        "PRIOR_TOKENS",
        "PRIOR_TOKENS = 20.0",
        "PRIOR_TOKENS = 100.0",
        ("tests/test_replay.py",),
    ),
    Mutant(  # what earlier processes learned never read back
        "lessons-not-recalled",
        "Memory.__init__",
        "        self.recalled = store.recall() if store else {}",
        "        self.recalled = {}",
        ("tests/test_lessons.py",),
    ),
    Mutant(  # a draft's first token's price left out of its lesson
        "lessons-without-first-token-price",
        "lesson_of",
        "    ratio = None if first_s is None else first_s / e.token_s",
        "    ratio = None",
        ("tests/test_lessons.py",),
    ),
    Mutant(  # a first token's recalled price not applied
        "recalled-first-token-price-unused",
        "Memory.remembered",
        "            known.first_s = known.token_s * lesson.first_ratio",
        "            pass",
        ("tests/test_lessons.py",),
    ),
    Mutant(  # a request's end not reported to the policy: nothing kept
        "request-end-unreported",
        "SpeculativeDecoder.stream",
        "            self.policy.end()",
        "            pass",
        ("tests/test_lessons.py",),
    ),
    Mutant(  # counts stored uncapped: a store that only stiffens
        "lessons-uncapped",
        "capped",
        "    if judged <= KEPT_OUTCOMES:",
        "    if True:",
        ("tests/test_lessons.py",),
    ),
    Mutant(  # a server writing its lessons at every request's end
        "lessons-written-every-request",
        "LessonStore.keep",
        "        due = self.written_at is None or now - self.written_at >= WRITE_EVERY_S",
        "        due = True",
        ("tests/test_lessons.py",),
    ),
    Mutant(  # more tokens kept than judged taken as a lesson
        "lessons-kept-above-judged",
        "parse_lesson",
        "        if not ok or not counts[0] <= counts[1] <= KEPT_OUTCOMES:",
        "        if not ok or not counts[1] <= KEPT_OUTCOMES:",
        ("tests/test_lessons.py",),
    ),
    Mutant(  # recalled counts that do not start the next request's estimates
        "recall-without-next-request",
        "ByPosition.recall",
        "                tally.add_counts(*outcomes[name])\n        self.next_request()",
        "                tally.add_counts(*outcomes[name])",
        ("tests/test_lessons.py",),
    ),
    Mutant(  # lessons held back by the 30 s lost when the process exits
        "held-back-lessons-lost-at-exit",
        "LessonStore.keep",
        "                atexit.register(self.flush)",
        "                pass",
        ("tests/test_lessons.py",),
    ),
    Mutant(  # a store's temporary file left behind by an interrupted write
        "store-temporary-left-on-interrupt",
        "write_store",
        "    except BaseException:",
        "    except OSError:",
        ("tests/test_lessons.py",),
    ),
    Mutant(  # typical-p keeps the tokens farthest from the entropy first
        "typical-p-farthest-first",
        "cut_typical",
        'np.argsort(np.abs(surprise - entropy), kind="stable")',
        'np.argsort(-np.abs(surprise - entropy), kind="stable")',
        (SAMPLING, ENGINE),
    ),
    Mutant(  # top-p's peak taken alone where it falls short of the cut
        "top-p-peak-alone-short-of-the-cut",
        "top_p_head",
        "    if high <= 1.0:  # the peak",
        "    if high <= 1.1:  # the peak",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # top-p's peak alone: the highest of the tied ids
        "top-p-peak-alone-highest-tied-id",
        "top_p_head",
        "        peak = int(np.argmax(w))",
        "        peak = len(w) - 1 - int(np.argmax(w[::-1]))",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # top-p keeps the token whose mass before it reaches the cut: one too many
        "top-p-nucleus-one-token-too-many",
        "nucleus",
        "    kept = int(np.count_nonzero(before < high))",
        "    kept = int(np.count_nonzero(before <= high))",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # top-p's heaviest first with ties by the highest id
        "top-p-ties-highest-id",
        "heaviest_first",
        "return at[np.argsort(",
        "at = at[::-1]\n    return at[np.argsort(",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # a row holding NaN raced as if the NaN were not there (fmax's blocks)
        "block-maxima-pass-nan-over",
        "block_maxima",
        "    refuse_nan(row)\n    out = []",
        "    out = []",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # top-k's column maxima pass a NaN row over (np.fmax): it draws from the rest
        "column-maxima-pass-nan-over",
        "down_maxima",
        "    refuse_nan(rows)\n    return np.fmax",
        "    return np.fmax",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # min-p's rows at once gather the tokens half a nat above the cut only
        "min-p-rows-cut-too-high",
        "min_p_columns",
        "    cut = (z_max + math.log(sp.min_p) - 1e-3) * float(sp.temperature)",
        "    cut = (z_max + math.log(sp.min_p) + 0.5) * float(sp.temperature)",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # a flat row left without columns (its peak) in min-p's rows at once
        "min-p-rows-flat-row-without-its-peak",
        "min_p_columns",
        "    columns[flat] = block_max[flat].max(axis=1, keepdims=True)",
        "    columns[flat] = columns[flat]",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # a step's rows with the tokens' and the blocks' noise offsets swapped
        "noise-offsets-token-and-block-swapped",
        "row_noise_offsets",
        "return np.array(pairs, dtype=np.uint64).reshape(n, 2).T",
        "return np.array(pairs, dtype=np.uint64).reshape(n, 2).T[::-1]",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # top-p's cut from the head alone, as if the tokens left out weighed nothing
        "top-p-head-ignores-the-tail",
        "top_p_head",
        "    high = top_p * (head + (len(row) - len(ids)) * left_out) * (1.0 + TOTAL_ROUNDING)",
        "    high = top_p * head * (1.0 + TOTAL_ROUNDING)",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # top-p's nucleus taken from the head where it needs tokens left out of it
        "top-p-head-trusts-a-short-nucleus",
        "nucleus",
        "        if kept == len(top) and not mass >= high:\n",
        "        if False:\n",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # a cut the tail's mass could move left to the whole row's exp and sort
        "top-p-head-skips-the-rows-total",
        "top_p_head",
        "    if kept is None and len(ids) < len(row):  # the tail's mass may move the cut\n",
        "    if False:\n",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # the m heaviest found without the entries tied with the m-th
        "heaviest-drops-ties",
        "heaviest",
        "        top = np.flatnonzero(weights >= np.partition(weights, n - m)[n - m])",
        "        top = np.flatnonzero(weights > np.partition(weights, n - m)[n - m])",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # a row's columns ordered lightest first where no floor holds its nucleus
        "nucleus-columns-lightest-first",
        "SpareNuclei.__init__",
        'order = np.argsort(-values, axis=1, kind="stable")',
        'order = np.argsort(values, axis=1, kind="stable")',
        ("tests/test_sampling_fast.py", BACKEND_SAMPLING),
    ),
    Mutant(  # the acceptance estimates' moving average back at 0.1
        "acceptance-smoothing-at-0.1",
        "ByPosition.__init__",
        "        smoothing: float = 0.05,",
        "        smoothing: float = 0.1,",
        ("tests/test_controller.py",),
    ),
    Mutant(  # the head's bound computed where z's rounding is wider than the head
        "top-p-head-at-float32s-end",
        "top_p_head",
        "    if slack > 1.0:  # logits near float32's end: z's rounding dwarfs the head's bound\n",
        "    if False:\n",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # top-p's masses summed in float32
        "top-p-masses-in-float32",
        "mass_before",
        "    np.cumsum(sorted_weights[:-1], dtype=np.float64, out=before[1:])",
        "    before[1:] = np.cumsum(sorted_weights[:-1], dtype=np.float32)",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # top-p's mass before a token counts the token too
        "top-p-mass-before-counts-the-token",
        "mass_before",
        "    np.cumsum(sorted_weights[:-1], dtype=np.float64, out=before[1:])",
        "    np.cumsum(sorted_weights, dtype=np.float64, out=before)",
        (SAMPLING, "tests/test_sampling_fast.py"),
    ),
    Mutant(  # the small supports raced on the rows' positions in order, past a large one
        "supports-race-skips-large-rows-positions",
        "supports_race",
        "        return tokens\n    row_of = np.repeat(np.arange(n), sizes)",
        "        return tokens\n"
        "    row_of = np.repeat(np.arange(np.count_nonzero(sizes)), sizes[sizes > 0])",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # a dense race looks into the likeliest token's block alone
        "dense-race-skips-other-blocks",
        "dense_race_front",
        "more = tokens_of_blocks(np.flatnonzero(e_min <= reach_s * w_max), all_ids(n), n)",
        "more = tokens_of_blocks(np.flatnonzero(w_max >= w_top), all_ids(n), n)",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # the per-token bound squared: tokens that can reach r left unhashed
        "dense-race-token-bound-too-tight",
        "dense_race_front",
        "more = more[(bound <= reach_s * w) & (bound > hashed_to * w)]",
        "more = more[(bound <= reach_s * w * w) & (bound > hashed_to * w)]",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # the first reach taken as final though the races found lie beyond it
        "dense-race-reach-never-rises",
        "dense_race_front",
        "        if r <= reach_s:\n            break",
        "        if True:\n            break",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # holders raced twice: the runner-up is the winner's own copy
        "dense-race-holders-hashed-again",
        "dense_race_front",
        "            more = more[~np.isin(more, held)]",
        "            more = more[:]",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # a vocabulary cut mid-row: its last partial row left out of the blocks' maxima
        "block-maxima-miss-the-partial-row",
        "block_maxima",
        "        np.maximum(top[..., :width], rest, out=top[..., :width])\n",
        "",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # the second band's ids folded onto the first's blocks
        "noise-blocks-ignore-the-band",
        "block_of",
        "    return ((ids >> NOISE_BAND_BITS) << NOISE_STRIDE_BITS) | (ids & (NOISE_STRIDE - 1))",
        "    return ids & (NOISE_STRIDE - 1)",
        (SAMPLING, "tests/test_sampling_fast.py"),
    ),
    Mutant(
        "race-dense-block-ids-wrong",
        "tokens_of_blocks",
        "block_tokens(blocks[:, None], all_ids(NOISE_BLOCK))",
        "block_tokens(blocks[:, None] + 1, all_ids(NOISE_BLOCK))",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(
        "race-sparse-block-ids-wrong",
        "tokens_of_blocks",
        "np.isin(block_of(ids), blocks)",
        "np.isin(ids, blocks)",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(
        "runtime-rollback-keeps-kv",
        "LlamaCppRuntime.rollback",
        "if beyond or not self.llama.llama_memory_seq_rm(self.memory, 0, n_past, -1):",
        "if False:",
        (ENGINE,),
    ),
    Mutant(
        "k-not-bounded-by-room",
        "SpeculativeDecoder.step",
        "k = min(k, room - 1)",
        "k = min(k, room)",
        (ENGINE,),
    ),
    Mutant(
        "stamp-trusts-mtime",
        "identity",
        'parts.append(f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}")',
        'parts.append(f"{st.st_size}:{st.st_mtime_ns}")',
        ("tests/test_hostile_integrity.py",),
    ),
    Mutant(
        "symlink-may-leave-bundle",
        "check_inside",
        "    if not path.resolve().is_relative_to(root):",
        "    if False:",
        ("tests/test_hostile_integrity.py",),
    ),
    Mutant(
        "signal-raised-in-native-call",
        "on_signal",
        "    if _depth == 0:\n        raise_if_requested()\n",
        "    raise_if_requested()\n",
        ("tests/test_hostile_signals.py",),
    ),
    Mutant(
        "staging-kept-on-failure",
        "export_bundle",
        "            shutil.rmtree(work_dir, ignore_errors=True)\n    except OSError",
        "            pass\n    except OSError",
        ("tests/test_hostile_signals.py",),
    ),
    Mutant(  # prompt-cache reuse trusting the whole last context: it holds one more token
        "reuse-trusts-the-uncached-last-token",
        "SpeculativeDecoder.reusable",
        "held = self.context[: self.target.n_past]",
        "held = self.context",
        ("tests/test_prompt_cache.py",),
    ),
    Mutant(  # --exact on ONNX without the padded one-token pass: MLAS's one-row kernels
        "onnx-exact-not-padded",
        "EXACT_ONNX",
        'EXACT_ONNX: dict = {"min_width": 2, "row_multiple": 2}',
        "EXACT_ONNX: dict = {}",
        ("tests/test_onnx.py",),
    ),
    Mutant(  # ONNX Runtime's CPU provider back on its fastest kernels by default
        "onnx-default-fastest-kernels",
        "open_runtime",
        'exact = (not standard and opts.device == "cpu") if opts.exact is None else opts.exact',
        "exact = bool(opts.exact)",
        ("tests/test_onnx.py",),
    ),
    Mutant(  # odd widths left unpadded on AVX-512, whose int8 GEMM takes rows in pairs
        "exact-onnx-odd-rows-on-avx512",
        "exact_onnx_options",
        'or "avx512f" in flags',
        'or "avx512" in flags',
        ("tests/test_onnx.py",),
    ),
    Mutant(  # a padded plain step's guess judged by rejection sampling: another sample
        "padding-guess-judged-by-rejection",
        "engine:PLAIN_RULE",
        "PLAIN_RULE = SamplingParams()",
        'PLAIN_RULE = SamplingParams(sampler="rejection")',
        ("tests/test_engine.py",),
    ),
    Mutant(  # the padding row left dead: the same output, a pass for every token
        "padding-row-dead",
        "SpeculativeDecoder.padding_guess",
        "if self.guesser is None or room < 2:",
        "if True:",
        ("tests/test_engine.py",),
    ),
    Mutant(  # a near-tie bound of d, not 2d: departures from noise would be called bugs
        "near-tie-not-doubled",
        "near_tie",
        'return 2 * BATCH_NOISE.get(backend or "", max(BATCH_NOISE.values()))',
        'return BATCH_NOISE.get(backend or "", max(BATCH_NOISE.values()))',
        ("tests/test_bench.py",),
    ),
    Mutant(
        "threads-count-our-own-time-as-other-work",
        "OtherWork.cores",
        "max(0.0, busy - (own1 - own0))",
        "max(0.0, busy)",
        ("tests/test_threads.py",),
    ),
    Mutant(
        "threads-trust-a-stale-average",
        "OtherWork.cores",
        "if stale:",
        "if False:",
        ("tests/test_threads.py",),
    ),
    Mutant(
        "threads-count-our-spinning-workers-as-others",
        "OtherWork.cores",
        "ours = max(ours_before, self.own_running())",
        "ours = 1",
        ("tests/test_threads.py",),
    ),
    Mutant(  # prompt lookup left to index the prompt in the first step's plan
        "free-drafter-not-read-with-the-prefill",
        "AdaptivePolicy.to_sync",
        "                    due.append(e.drafter)  # decoding); then it indexes as it goes",
        "                    pass  # decoding); then it indexes as it goes",
        ("tests/test_controller.py", ENGINE),
    ),
    Mutant(  # a probe of 2 tokens whatever the curve
        "probe-width-fixed-at-two",
        "AdaptivePolicy.probe",
        "            k = min(self.probe_k(e), e.offer.available)",
        "            k = min(2, e.offer.available)",
        ("tests/test_controller.py",),
    ),
    Mutant(  # probes whatever the last losing ones cost
        "probe-debt-ignored",
        "ProbeBudget.owes",
        "        return self.debt_s > 0.0",
        "        return self.debt_s > 1e9",
        ("tests/test_controller.py",),
    ),
    Mutant(  # a losing probe's debt never paid back: no probe again
        "probe-debt-never-paid",
        "ProbeBudget.repay",
        "self.debt_s = max(0.0, self.debt_s - PROBE_BUDGET * passed_s)",
        "self.debt_s = max(0.0, self.debt_s - 0.0 * passed_s)",
        ("tests/test_controller.py",),
    ),
    Mutant(  # a probe owes nothing however much it lost
        "probe-loss-not-owed",
        "ProbeBudget.owe",
        "self.debt_s = max(0.0, self.debt_s + loss_s)",
        "self.debt_s = max(0.0, self.debt_s)",
        ("tests/test_controller.py",),
    ),
    Mutant(  # a draft model caught up where plain decoding is its best in step
        "synced-where-plain-wins-in-step",
        "AdaptivePolicy.to_sync",
        "            wins = in_step_choice.drafter is e.drafter\n",
        "            wins = True\n",
        ("tests/test_controller.py",),
    ),
    Mutant(  # a probe owes its loss before probes have judged the drafter
        "probe-debt-from-the-first-probe",
        "AdaptivePolicy.observe",
        "        if e.judged >= COLD_JUDGED:\n            self.budget.owe",
        "        if True:\n            self.budget.owe",
        ("tests/test_controller.py",),
    ),
    Mutant(  # a judged drafter probed as wide as one never judged
        "judged-probe-at-ninety-percent",
        "AdaptivePolicy.probe_k",
        "        if e.judged < COLD_JUDGED:\n            return self.winning_k(e)",
        "        if True:\n            return self.winning_k(e)",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "acceptance-reset-per-request",
        "AdaptivePolicy.new_estimate",
        "            known.acceptance.next_request()",
        "            known.acceptance = drafter.acceptance()",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "acceptance-carries-the-last-requests-ema",
        "ByMatchLength.next_request",
        "        self.values.clear()",
        "        pass",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "pooled-sure-and-unsure-swapped",
        "ByPosition.observe",
        "(self.unsure_tally if unsure else self.sure_tally).add(kept)",
        "(self.sure_tally if unsure else self.unsure_tally).add(kept)",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "prior-weight-ignored",
        "Tally.rate",
        "return (self.hits + prior * weight) / (self.seen + weight)",
        "return (self.hits + prior) / (self.seen + 1)",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "the-plan-priced-as-drafting",
        "SpeculativeDecoder.step",
        "t_draft = t1 - t0 - draft.t_catch_up",
        "t_draft = t1 - t_plan - draft.t_catch_up",
        ("tests/test_engine.py",),
    ),
    Mutant(
        "the-plan-counted-as-drafting-time",
        "SpeculativeDecoder.step",
        "stats.t_draft += (t_plan - t_sync) + (t1 - t0)",
        "stats.t_draft += t1 - t_sync",
        ("tests/test_engine.py",),
    ),
    Mutant(
        "onnx-ir-version-left-to-onnx",
        "GraphBuilder.model",
        'producer_name="edgespec", ir_version=IR_VERSION',
        'producer_name="edgespec"',
        ("tests/test_onnx.py",),
    ),
    Mutant(
        "a-drafts-reforward-left-uncaptured",
        "captured_graph_id",
        "if rows == 1 and width <= LAST_ROW_GRAPH_WIDTH:",
        "if rows == 1 and width < LAST_ROW_GRAPH_WIDTH:",
        ("tests/test_onnx.py",),
    ),
    Mutant(
        "gpu-layers-asked-of-a-cpu-build-run-there-unsaid",
        "LlamaCppRuntime.__init__",
        "n_gpu_layers = self.offloadable(n_gpu_layers)",
        "pass",
        ("tests/test_llamacpp.py",),
    ),
    Mutant(
        "tensorrt-captures-one-kv-parity-at-load",
        "TensorRTRuntime.capture_graphs",
        "for _ in range(2):  # run() captures the parity it meets, then flips it",
        "for _ in range(1):",
        ("tests/test_tensorrt.py",),
    ),
    Mutant(
        "capturing-at-load-leaves-the-cache-moved",
        "OnnxRuntime.capture_graphs",
        "            self.rollback(n_past)\n        return len(todo)",
        "        return len(todo)",
        ("tests/test_onnx.py",),
    ),
    Mutant(
        "a-one-graph-draft-forwards-two-tokens-a-pass",
        "ModelDrafter.catch_up",
        "if self.one_token_passes and len(context) - keep > 1:",
        "if self.one_token_passes and len(context) - keep > 2:",
        ("tests/test_draft_sync.py",),
    ),
    Mutant(
        "leaving-plain-charged-one-switch",
        "Switches.switch_s",
        "return [0.0] + [LEAVE_PLAIN_SWITCHES * s] * self.k_max",
        "return [0.0] + [s] * self.k_max",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "a-capturing-pass-charged-nothing",
        "Switches.pass_switch_s",
        "if width != self.width or self.in_row == 1:",
        "if width != self.width:",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "a-switch-taken-for-the-devices-speed",
        "AdaptivePolicy.observe",
        "self.curve.observe_target(k + 1, t_verify - switched_s)",
        "self.curve.observe_target(k + 1, t_verify)",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "one-graph-calibration-keeps-uncaptured-passes",
        "replayed",
        "return [t - switch_s for t in target_s], switch_s",
        "return list(target_s), switch_s",
        ("tests/test_measure_curve.py",),
    ),
    Mutant(
        "one-graph-curves-share-a-key",
        "ModelPair.runtime_description",
        '+ (" one-graph" if self.target.keeps_one_graph else "")',
        '+ ""',
        ("tests/test_calibrate.py",),
    ),
    Mutant(
        "can-win-kept-whatever-the-price",
        "AdaptivePolicy.winning_k",
        "if held is None or held[0] is not self.curve or not math.isclose(held[1], price):",
        "if held is None or held[0] is not self.curve:",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "ngram-trusts-any-long-context-to-extend-the-index",
        "NgramDrafter.sync",
        "grown = context is self.synced and len(context) >= n_old",
        "grown = len(context) >= n_old",
        ("tests/test_ngram.py",),
    ),
    Mutant(
        "top-p-keeps-the-tokens-it-cuts",
        "cut_top_p",
        "    return weights * keep\n",
        "    return weights * ~keep\n",
        (SAMPLING, "tests/test_sampling_fast.py"),
    ),
    Mutant(
        "an-observed-cost-pulls-unclipped",
        "followed",
        "clipped = min(max(observed, estimate / MAX_PULL), estimate * MAX_PULL)",
        "clipped = observed",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "draft-price-followed-unclipped",
        "AdaptivePolicy.learn_draft_cost",
        "e.token_s = followed(e.token_s, t_draft / k, smoothing)",
        "e.token_s += smoothing * (t_draft / k - e.token_s)",
        ("tests/test_controller.py", "tests/test_replay.py"),
    ),
    Mutant(
        "first-token-priced-as-any",
        "draft_s",
        "return (token_s if first_s is None else first_s) + (k - 1) * token_s",
        "return k * token_s",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "a-cold-probe-backs-off",
        "AdaptivePolicy.observe",
        "if e.judged >= COLD_JUDGED:",
        "if True:",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "trial-never-prefilled",
        "AdaptivePolicy.to_sync",
        "if prefill and e.trial:",
        "if False:",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "trial-waits-for-interval",
        "AdaptivePolicy.probe",
        "if (e.idle < e.interval and not e.trial) or",
        "if e.idle < e.interval or",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "trial-outlives-a-slow-probe",
        "AdaptivePolicy.observe",
        "e.trial = e.trial and faster",
        "e.trial = e.trial",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "trial-for-a-judged-drafter",
        "AdaptivePolicy.new_estimate",
        "e.trial = e.judged == 0 and not e.free",
        "e.trial = not e.free",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "leaving-plain-prepays-no-capture",
        "Switches.switch_s",
        "0.0 if prepaid and n == self.width else self.pass_switch_s(n)",
        "self.pass_switch_s(n)",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "sync-prices-no-switches",
        "AdaptivePolicy.to_sync",
        "best_choice(self.curve, [in_step], self.k_max, switch_s=switch_s)",
        "best_choice(self.curve, [in_step], self.k_max)",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "buying-a-width-ignores-catch-up",
        "Switches.rent_or_buy",
        "buy_s = switch_s[width - 1] - switch_s[myopic.k] + catch_up_s",
        "buy_s = switch_s[width - 1] - switch_s[myopic.k]",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "the-prompt-pass-taken-as-plain",
        "Switches.begin",
        "self.width, self.in_row = 0, 1",
        "self.width, self.in_row = 1, 2",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "a-qwen2-target-carries-a-head",
        "check_target_keeps_layer_inputs",
        "    if arch not in KEEPS_LAYER_INPUTS:",
        "    if arch is None:",
        ("tests/test_head_cli.py",),
    ),
    Mutant(
        "the-head-offloaded-beside-a-cpu-target",
        "EagleHead.__init__",
        "-1 if target.n_gpu_layers else 0",
        "-1",
        ("tests/test_eagle.py",),
    ),
    Mutant(
        "a-heads-first-token-unmeasured",
        "HeadDrafter.propose",
        "t_first=0.0 if t_catch_up else t_first",
        "t_first=0.0",
        ("tests/test_eagle.py",),
    ),
    Mutant(
        "target-scale-followed-unclipped",
        "CostCurve.observe_target",
        "scale = followed(1.0, seconds / self.target_s[n - 1], self.smoothing)",
        "scale = 1.0 + self.smoothing * (seconds / self.target_s[n - 1] - 1.0)",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "unknown-price-starts-from-zero",
        "followed",
        "    if estimate <= 0.0:\n        return observed\n",
        "",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "probe-a-previewing-drafter",
        "AdaptivePolicy.probe",
        "or e.offer.available == 0 or e.offer.preview:",
        "or e.offer.available == 0:",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "shadow-counted-beside-its-draft",
        "AdaptivePolicy.cast_shadows",
        "e.shadow = None  # judged by the verify pass",
        "pass  # judged by the verify pass",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "shadow-judged-one-token-late",
        "Shadow.outcome",
        "return i + 1, i",
        "return i + 2, i + 1",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "curve-learned-width-by-width",
        "CostCurve.observe_target",
        "self.target_s = [t * scale for t in self.target_s]",
        "self.target_s[n - 1] *= scale",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "draft-price-ignores-the-device-slowing",
        "AdaptivePolicy.observe",
        "e.token_s *= scale",
        "e.token_s *= 1.0",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "shadow-judged-after-the-whole-preview",
        "Shadow.outcome",
        "judged = len(emitted) >= min(SHADOW_JUDGED_AFTER, len(self.tokens))",
        "judged = len(emitted) == len(self.tokens)",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "shadow-judged-after-one-right-token",
        "SHADOW_JUDGED_AFTER",
        "SHADOW_JUDGED_AFTER = 2",
        "SHADOW_JUDGED_AFTER = 1",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "niced-work-of-another-session-yields",
        "yields_to_us",
        "return ours is not None and sched_group(pid) == ours",
        "return True",
        ("tests/test_threads.py",),
    ),
    Mutant(
        "niced-time-never-counts-unless-we-are-niced",
        "OtherWork.niced_time_counts",
        "        return self.niced_checked[1]",
        "        return False",
        ("tests/test_threads.py",),
    ),
    Mutant(
        "niced-group-scanned-every-window",
        "OtherWork.niced_time_counts",
        "now - self.niced_checked[0] > GROUP_SECONDS",
        "True",
        ("tests/test_threads.py",),
    ),
    Mutant(
        "niced-tasks-counted-after-a-gap",
        "others_running_competing",
        "found += nice <= 0",
        "found += 1",
        ("tests/test_threads.py",),
    ),
    Mutant(
        "curve-extended-from-its-last-pair",
        "CostCurve.target",
        "slope = max(0.0, (t[-1] - t[0]) / (len(t) - 1))",
        "slope = (t[-1] - t[-2])",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "genai-mask-length-as-cache-length",
        "genai_graph",
        'helper.make_node("Sub", ["genai_n", "genai_one"], ["genai_last"]),',
        'helper.make_node("Sub", ["genai_n", "genai_zero"], ["genai_last"]),',
        ("tests/test_peer_genai.py",),
    ),
    Mutant(
        "genai-peer-divided-by-our-plain",
        "PEER_PLAINS",
        "PEER_PLAINS = {PEER: PEER_PLAIN, GENAI_DRAFT: GENAI_PLAIN, GENAI_NGRAM: GENAI_PLAIN}",
        'PEER_PLAINS = {PEER: PEER_PLAIN, GENAI_DRAFT: "plain", GENAI_NGRAM: GENAI_PLAIN}',
        ("tests/test_peer_genai.py",),
    ),
    Mutant(
        "departure-at-plains-end-ungapped",
        "Bench.compare",
        "            if run.departure is not None:  # at len(ref.tokens)",
        "            if run.departure is not None and run.departure < len(ref.tokens):  # at",
        ("tests/test_bench.py",),
    ),
    Mutant(
        "calibration-unpaired",
        "measure_curve",
        "ratios[n].append(time_pass(runtime, n, rng) / one_token[-1])",
        "ratios[n].append(time_pass(runtime, n, rng) / one_token[0])",
        ("tests/test_measure_curve.py",),
    ),
    Mutant(
        "older-stored-calibration-reused",
        "load_tuned",
        'entry.get("calibration") != CALIBRATION_VERSION',
        'entry.get("calibration") != entry.get("calibration")',
        ("tests/test_calibrate.py",),
    ),
    Mutant(
        "older-bundled-calibration-reused",
        "bundle_curve",
        'tune.get("calibration") != CALIBRATION_VERSION',
        'tune.get("calibration") != tune.get("calibration")',
        ("tests/test_calibrate.py",),
    ),
    Mutant(
        "step-leaves-draft-model-free",
        "draft_rates",
        "rates.append(tokens / (ended + reach * cost + tokens * leaves_s))",
        "rates.append(tokens / (ended + reach * cost))",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "draft-priced-as-always-whole",
        "draft_rates",
        "ended += reach * (1.0 - goes_on[k - 1]) * cost",
        "ended += 0.0 * reach * (1.0 - goes_on[k - 1]) * cost",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "unsure-token-counted-as-sure",
        "ByPosition.observe",
        "estimate = self.unsure if unsure else self.sure",
        "estimate = self.sure",
        ("tests/test_controller.py",),
    ),
    Mutant(
        "draft-goes-on-past-unsure-token",
        "ModelDrafter.propose",
        "            if unsure or i + 1 == k:",
        "            if i + 1 == k:",
        ("tests/test_draft_confidence.py",),
    ),
    Mutant(
        "exact-onnx-odd-rows",
        "OnnxRuntime.padded_width",
        "return n + -n % self.row_multiple",
        "return n",
        ("tests/test_onnx.py",),
    ),
    Mutant(
        "cut-draft-proposes-column-numbers",
        "ModelDrafter.propose",
        "tokens[i] = column if self.columns is None else self.columns[column]",
        "tokens[i] = column",
        ("tests/test_draft_vocab.py",),
    ),
    Mutant(
        "cut-draft-samples-columns",
        "ModelDrafter.propose",
        "tokens[i] = dist.sample(self.rng)",
        "tokens[i] = token_dist(scores, sp).sample(self.rng)",
        ("tests/test_draft_vocab.py",),
    ),
    Mutant(
        "cut-draft-gumbel-on-columns",
        "ModelDrafter.propose",
        "tokens[i], margin = dist.gumbel_max_margin(seed, len(context) + i)",
        "tokens[i], margin = token_dist(scores, sp).gumbel_max_margin(seed, len(context) + i)",
        ("tests/test_draft_vocab.py",),
    ),
    Mutant(
        "cut-head-keeps-no-specials",
        "head_ranges",
        "    ids = sorted({i for i in always if keep <= i < n_vocab})",
        "    ids: list[int] = []",
        ("tests/test_draft_vocab.py",),
    ),
    Mutant(
        "top-id-takes-the-last-maximum",
        "first_max",
        'column = g.op("ArgMax", held, axis=-1, keepdims=0)',
        'column = g.op("ArgMax", held, axis=-1, keepdims=0, select_last_index=1)',
        ("tests/test_top_outputs.py",),
    ),
    Mutant(
        "top-p-is-the-sum",
        "top_outputs",
        '"top_p": (g.op("Reciprocal", total), TensorProto.FLOAT)',
        '"top_p": (total, TensorProto.FLOAT)',
        ("tests/test_top_outputs.py",),
    ),
    Mutant(
        "top-rows-ignore-the-cut",
        "forward_top",
        "if width is None and runtime.top_outputs:",
        "if runtime.top_outputs:",
        ("tests/test_top_outputs.py",),
    ),
    Mutant(
        "top-rows-of-padded-steps-from-the-start",
        "OnnxRuntime.run_step",
        "return step, slice(n - wanted, n) if width != n else slice(0, wanted)",
        "return step, slice(0, wanted)",
        ("tests/test_top_outputs.py",),
    ),
    Mutant(
        "greedy-steps-copy-the-logits",
        "forward_top",
        "return runtime.forward_top(tokens, last_only=last_only, with_prob=with_prob)",
        "return top_of(runtime.forward(tokens, last_only=last_only), with_prob)",
        ("tests/test_top_outputs.py",),
    ),
    Mutant(
        "greedy-draft-never-unsure",
        "ModelDrafter.propose",
        "unsure = gated and prob is not None and bool(prob[-1] < self.confidence)",
        "unsure = False",
        ("tests/test_top_outputs.py", "tests/test_draft_confidence.py"),
    ),
    Mutant(
        "gumbel-draft-never-unsure",
        "ModelDrafter.propose",
        "unsure = gated and margin < self.margin",
        "unsure = False",
        ("tests/test_draft_confidence.py",),
    ),
    Mutant(
        "gumbel-margin-from-the-log-of-the-sum",
        "gumbel_max_margin",
        "return token, float(np.log(second / first))",
        "return token, float(np.log(second + first))",
        ("tests/test_sampling.py", "tests/test_draft_confidence.py"),
    ),
    Mutant(
        "lookup-history-keeps-prompts",
        "NgramDrafter.reset",
        "completion = tuple(self.indexed[self.prompt_len :])",
        "completion = tuple(self.indexed)",
        ("tests/test_lookup_history.py",),
    ),
    Mutant(
        "kv-buffer-in-huge-pages",
        "lazy_zeros",
        "memory.madvise(mmap.MADV_NOHUGEPAGE)",
        "memory.madvise(mmap.MADV_HUGEPAGE)",
        ("tests/test_hugepages.py",),
    ),
    Mutant(
        "kv-buffer-shared-with-a-fork",
        "lazy_zeros",
        "flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS",
        "flags = mmap.MAP_SHARED | mmap.MAP_ANONYMOUS",
        ("tests/test_hugepages.py",),
    ),
    Mutant(
        "onnx-kv-cache-from-numpy",
        "zeroed_value",
        "zeros: np.ndarray = lazy_zeros(shape, dtype)",
        "zeros: np.ndarray = np.zeros(shape, dtype)",
        ("tests/test_hugepages.py",),
    ),
    Mutant(
        "command-never-restarts-with-huge-pages",
        "cli:main",
        "        hugepages.reexec_with_tunable()",
        "        pass",
        ("tests/test_hugepages.py",),
    ),
    Mutant(
        "huge-pages-ignore-the-opt-out",
        "why_not",
        'if environ.get(ENV_OFF) == "0":',
        'if environ.get(ENV_OFF) == "off":',
        ("tests/test_hugepages.py",),
    ),
    Mutant(
        "onnx-pool-spins-unbounded",
        "configure_threads",
        'opts.add_session_config_entry("session.intra_op.spin_duration_us", str(pool.spin_us))',
        "pass",
        ("tests/test_thread_pools.py",),
    ),
    Mutant(
        "onnx-default-pool-is-the-shared-one",
        "default_pool",
        "    if _shared_pool_threads or not spin_can_be_bounded():",
        "    if True:",
        ("tests/test_thread_pools.py",),
    ),
    Mutant(
        "onnx-bounded-spin-on-old-onnxruntime",
        "SPIN_US_SINCE",
        "SPIN_US_SINCE = (1, 26)",
        "SPIN_US_SINCE = (1, 20)",
        ("tests/test_thread_pools.py",),
    ),
    Mutant(  # a column left out may then tie or beat one kept
        "head-spare-not-checked",
        "candidate_dist",
        "    if not z[m - 1] > z[m]:  # a tie across the boundary (or NaN): the whole row decides",
        "    if False:",
        (HEAD,),
    ),
    Mutant(
        "head-top-k-past-the-candidates",
        "candidate_dist",
        "        if sp.top_k > m:\n            return None\n",
        "",
        (HEAD,),
    ),
    Mutant(  # normalized over the candidates: top-p's mass reached too early
        "head-ignores-log-sum-exp",
        "candidate_dist",
        "    probs = np.exp(z - np.float32(lse)).astype(np.float32)",
        "    probs = (np.exp(z - z.max()) / np.exp(z - z.max()).sum()).astype(np.float32)",
        (HEAD,),
    ),
    Mutant(
        "head-top-p-mass-not-checked",
        "candidate_dist",
        "        if not sorted_mass(probs) >= sp.top_p:  # the row's mass is 1 by lse",
        "        if False:",
        (HEAD,),
    ),
    Mutant(  # ids in the head's order (by value), not ascending as TokenDist keeps them
        "head-ids-unsorted",
        "candidate_dist",
        '    order = np.argsort(ids[:m], kind="stable")  # ascending ids, as upper_set gives them',
        "    order = np.arange(m)",
        (HEAD,),
    ),
    Mutant(  # correct, but every sampled row's logits copied to the host again
        "head-never-used",
        "forward_dists",
        "    if width is None and runtime.dists_on_device:",
        "    if False:",
        (HEAD,),
    ),
    Mutant(  # a tie across blocks: the last block holding the max, not the first
        "top-id-from-the-last-block-holding-the-max",
        "first_max",
        'block = g.op("ArgMax", maxima, axis=-1, keepdims=1)',
        'block = g.op("ArgMax", maxima, axis=-1, keepdims=1, select_last_index=1)',
        (TOP,),
    ),
    Mutant(  # a row whose logits are all below zero: the padding's block holds its "max"
        "top-outputs-padded-with-zeros",
        "first_max",
        "np.array(-np.inf, np.float32)",
        "np.array(0.0, np.float32)",
        (TOP,),
    ),
    Mutant(  # max(logits), not max(logits / T): exp(z - max) overflows at a low temperature
        "head-max-not-over-the-temperature",
        "head_model",
        'helper.make_node("Mul", ["largest", "inv_temperature"], ["z_max"])',
        'helper.make_node("Identity", ["largest"], ["z_max"])',
        (HEAD,),
    ),
    Mutant(  # its run() leaves no bound step: forward_dists would run the other graph's steps
        "standard-onnx-takes-a-sampling-head",
        "StandardOnnxRuntime",
        "    binds_steps = False",
        "    binds_steps = True",
        ("tests/test_onnx_standard.py",),
    ),
    Mutant(  # a layer's output, not its input: what the head reads is one layer late
        "onnx-features-after-the-layer",
        "onnx_export:build_decoder",
        "        x = decoder_layer(g, x, info, w, i)\n",
        "        x = decoder_layer(g, x, info, w, i)\n        layer_inputs[i] = x\n",
        ("tests/test_onnx_features.py",),
    ),
    Mutant(  # kept where the padded step's rows start, not at the pass's own positions
        "onnx-features-kept-one-late",
        "OnnxRuntime.run_step",
        "self.kept.write(self.n_past, step.values",
        "self.kept.write(self.n_past + 1, step.values",
        ("tests/test_onnx_features.py",),
    ),
    Mutant(  # a drafter that cannot win is priced all the same
        "price-a-drafter-that-cannot-win",
        "best_choice",
        "if rate_bound(curve, option, k_max) <= best.tokens_per_second:",
        "if rate_bound(curve, option, k_max) < 0.0:",
        ("tests/test_controller.py",),
    ),
    Mutant(  # the bound takes the dearest verify pass: one that could win is skipped
        "rate-bound-below-a-rate",
        "rate_bound",
        "option.draft_s(1) + min(curve.targets(n + 1)[1:])",
        "option.draft_s(1) + max(curve.targets(n + 1)[1:])",
        ("tests/test_controller.py",),
    ),
    Mutant(  # q and k left in llama.cpp's pair order under rotate-half RoPE
        "onnx-head-rope-as-stored",
        "HeadTensors.__init__",
        "self.entries[name] = unpermute_from_interleaved_rope(self.entries[name], heads)",
        "self.entries[name] = self.entries[name]",
        ("tests/test_onnx_head.py",),
    ),
    Mutant(  # a rejected draft's rows stay in the head's cache
        "onnx-head-keeps-rejected-rows",
        "OnnxEagleHead.rollback",
        "self.n_past = min(self.n_past, n_past)",
        "self.n_past = self.n_past",
        ("tests/test_onnx_head.py",),
    ),
    Mutant(  # draft columns placed one id early
        "onnx-head-d2t-shifted",
        "OnnxEagleHead.target_logits",
        "out[self.columns] = row",
        "out[self.columns - 1] = row",
        ("tests/test_onnx_head.py",),
    ),
    Mutant(  # the MTP layer's own state read where this llama.cpp's masked copy puts it
        "mtp-state-first-row",
        "HeadContext.decode",
        "last = -1 if self.outputs_all_rows else n - 1",
        "last = -1",
        ("tests/test_mtp.py",),
    ),
    Mutant(  # the MTP layer fed the target's state at the token's own position, not before it
        "mtp-features-one-late",
        "HeadDrafter.catch_up",
        "g = self.head.encode(self.target.features(start, stop))",
        "g = self.head.encode(self.target.features(min(start + 1, stop - 1), stop))",
        ("tests/test_mtp.py",),
    ),
    Mutant(  # the target's final states kept one position early
        "mtp-final-state-kept-one-early",
        "HeadFeatures.keep_states",
        "self.kept.write(self.n_past, rows(ptr, n, width))",
        "self.kept.write(max(0, self.n_past - 1), rows(ptr, n, width))",
        ("tests/test_mtp.py",),
    ),
    Mutant(  # an MTP target loaded without its layer whatever was asked
        "mtp-layers-never-loaded",
        "LlamaCppRuntime.load_model",
        "params.load_mtp = mtp",
        "params.load_mtp = False",
        ("tests/test_mtp.py",),
    ),
    Mutant(  # MTP layers of an architecture left out of MTP_ARCHS drafted with all the same
        "mtp-left-out-arch-drafted",
        "HeadFeatures.runnable_mtp_layers",
        "if arch in MTP_ARCHS or not n:",
        "if True:",
        ("tests/test_mtp.py",),
    ),
    Mutant(  # --drafter mtp refused without the reason the target's layers are unused
        "mtp-refusal-reason-dropped",
        "edgespec.loader:load_decoder",
        "pair.target.mtp_refused",
        '""',
        ("tests/test_mtp.py",),
    ),
    Mutant(  # a recurrent state cut back wherever llama.cpp says yes (it says yes to cuts past
        # the last pass's snapshots and leaves a stale state)
        "recurrent-cut-trusted",
        "LlamaCppRuntime.rollback",
        "beyond = self.recurrent and self.n_past - n_past > self.snapshot_reach",
        "beyond = False",
        ("tests/test_recurrent.py",),
    ),
    Mutant(  # no state snapshots asked for: every rollback of a hybrid target a replay
        "recurrent-no-snapshots",
        "LlamaCppRuntime.new_context",
        "params.n_rs_seq = self.snapshots",
        "params.n_rs_seq = 0",
        ("tests/test_recurrent.py",),
    ),
    Mutant(  # a draft model that marks nothing before its one-token passes
        "draft-marks-nothing",
        "ModelDrafter.propose",
        "        if k > 1:  # one-token passes follow: the next step cuts back into them",
        "        if False:",
        ("tests/test_recurrent.py",),
    ),
    Mutant(  # the state put back at the mark, the KV cache left uncut past it
        "mark-restored-kv-kept",
        "LlamaCppRuntime.rebuild",
        "if not restored or not self.llama.llama_memory_seq_rm(self.memory, 0, at, -1):",
        "if not restored:",
        ("tests/test_recurrent.py",),
    ),
    Mutant(  # a hybrid's snapshots not sized to the decoder's longest draft (memory)
        "snapshots-not-sized",
        "loader:load_decoder",
        "    runtime = replace(runtime, rollback=spec.longest_draft)",
        "    runtime = runtime",
        ("tests/test_recurrent.py",),
    ),
    Mutant(  # speculation on a target that re-reads its context at every rejected draft
        "speculation-without-snapshots",
        "speculation_that_can_pay",
        'if spec.drafter == "none" or pair.target.max_rollback != 0:',
        "if True:",
        ("tests/test_recurrent.py",),
    ),
    Mutant(  # one scratch array a shape, whatever the dtype: float64 rows rounded to float32
        "top-of-scratch-ignores-the-dtype",
        "scratch",
        "    held, key = SCRATCH.arrays, (shape, np.dtype(dtype))",
        "    held, key = SCRATCH.arrays, (shape, np.dtype(np.float32))",
        ("tests/test_draft_confidence.py",),
    ),
    Mutant(  # no spare column: a tie between the k-th logit and one left out goes unseen
        "backend-top-k-without-the-spare",
        "spare_columns",
        "        return sp.top_k + 1 if sp.top_k < n_columns else 0",
        "        return sp.top_k if sp.top_k < n_columns else 0",
        (BACKEND_SAMPLING,),
    ),
    Mutant(  # the sampler's columns in llama.cpp's order: candidate_dist reads them largest first
        "backend-top-k-columns-unsorted",
        "largest_first",
        'order = np.argsort(-values, axis=1, kind="stable")',
        "order = np.argsort(np.zeros_like(values), axis=1)",
        (BACKEND_SAMPLING,),
    ),
    Mutant(  # a later pass with the sampler still attached: its rows are not the logits
        "backend-sampler-left-attached",
        "LlamaCppRuntime.forward",
        "        self.attach_top_k(0)  # every column wanted\n",
        "",
        (BACKEND_SAMPLING,),
    ),
    Mutant(  # a tie at the cut re-runs nothing: the rows are read from the sampler's pass
        "backend-tie-rereads-stale-logits",
        "LlamaCppRuntime.sampled_pass.read_row",
        "                self.rollback(start)  # the same tokens again, every column this time\n",
        "",
        (BACKEND_SAMPLING,),
    ),
    Mutant(  # top-p's cut at once keeps the token whose mass before it reaches top_p exactly
        "top-k-rows-top-p-inclusive",
        "top_k_probs",
        "keep[rows, order] = before < sp.top_p * total[:, None]",
        "keep[rows, order] = before <= sp.top_p * total[:, None]",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # top-p's order at once without ties by id: a tie at the cut keeps another token
        "top-k-rows-top-p-ties-unordered",
        "top_k_probs",
        'np.argsort(-weights, axis=1, kind="stable")',
        "np.argsort(-weights, axis=1)",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # the spare's bound dropped: a column left out that outraces the candidates is missed
        "spare-race-without-the-outside-bound",
        "spare_gumbel_maxes",
        "return np.where(best < outside, winner, -1)",
        "return winner",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # one round: a candidate not hashed under the first reach may beat a best above it
        "spare-race-one-round",
        "spare_gumbel_maxes",
        "        rows = rows[best[rows] > reach[rows]]\n",
        "        rows = rows[:0]\n",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # a later round's better race keeps the earlier round's winner (the lower id)
        "spare-race-winner-kept-across-rounds",
        "spare_gumbel_maxes",
        "        winner[best < before] = n_columns  # a new best race: its own tokens only\n",
        "",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # min-p from the candidates though a token left out may reach the cut
        "spare-min-p-ignores-the-spare",
        "spare_min_p_supports",
        "    decided = (values.min(axis=1) < low) & (np.bincount(",
        "    decided = (values.min(axis=1) < np.inf) & (np.bincount(",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # min-p's rows normalized as one padded block: a float32 sum rounds by its length
        "spare-min-p-rows-summed-at-once",
        "spare_min_p_supports",
        "    totals = [weights[a:b].sum() for a, b in row_ranges(row_of, n)]",
        "    totals = [weights[a:b].sum(dtype=np.float64) for a, b in row_ranges(row_of, n)]",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # supports raced at once, each won by its slowest race
        "supports-race-slowest-wins",
        "supports_race",
        "    tokens[filled] = ids[order[starts[filled]]]",
        "    tokens[filled] = ids[order[starts[filled] + sizes[filled] - 1]]",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # top-p from the columns under the rejection sampler: its nuclei re-run the pass
        "backend-top-p-rejection-cut",
        "spare_columns",
        "    raced = sp.top_k == 0 and sp.min_p <= 0.0  #",
        "    raced = sp.top_k == 0 and sp.top_p >= 1.0 and sp.min_p <= 0.0  #",
        (BACKEND_SAMPLING,),
    ),
    Mutant(  # the nucleus's total without the tokens left out: its edge decided too soon
        "spare-nuclei-without-the-left-out",
        "SpareNuclei.__init__",
        "high = sp.top_p * (total + (n_columns - columns) * spare) * (1.0 + TOTAL_ROUNDING)",
        "high = sp.top_p * total * (1.0 + TOTAL_ROUNDING)",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # a nucleus that may reach past the columns (to the spare) taken as theirs
        "spare-nuclei-past-the-candidates",
        "SpareNuclei.check_usable",
        "        self.usable &= self.w[rows, last - 1] > spare\n",
        "",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # every row ordered above the first floor, though its nucleus reaches below it
        "spare-nuclei-one-floor-for-all",
        "SpareNuclei.above_floors",
        "            holds = heavy >= self.high[rows] * (1.0 + TOTAL_ROUNDING)",
        "            holds = heavy == heavy",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # a floor's columns summed in column order, not heaviest first
        "spare-nuclei-floor-columns-unordered",
        "SpareNuclei.order_heaviest",
        "        order = np.lexsort((j, -values[row_of, j], row_of))",
        "        order = np.lexsort((-values[row_of, j], j, row_of))",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # the last column taken for the spare: llama.cpp's columns come in no order
        "spare-race-spare-taken-last",
        "spare_gumbel_maxes",
        "scaled_weights(values.min(axis=1), temperature, z_max))",
        "scaled_weights(values[:, -1], temperature, z_max))",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # the first column taken for the peak: llama.cpp's columns come in no order
        "spare-peak-taken-first",
        "row_peaks",
        "    z_max = np.divide(values.max(axis=1), np.float32(sp.temperature), dtype=np.float32)",
        "    z_max = np.divide(values[:, 0], np.float32(sp.temperature), dtype=np.float32)",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # 2-D nonzero's columns counted by the mask's rows
        "true-at-divides-by-rows",
        "true_at",
        "    return np.divmod(np.flatnonzero(mask), max(mask.shape[1], 1))",
        "    return np.divmod(np.flatnonzero(mask), max(mask.shape[0], 1))",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # top-k's spare taken as the last column: llama.cpp's come in no order
        "backend-top-k-spare-taken-last",
        "top_k_of_candidates",
        "    tied = ~(smallest[:, 1] > smallest[:, 0]) | np.isnan(z).any(axis=1)",
        "    tied = ~(z[:, -2] > z[:, -1]) | np.isnan(z).any(axis=1)",
        ("tests/test_sampling_fast.py", BACKEND_SAMPLING),
    ),
    Mutant(  # SpareNuclei's rows at once without kept_dist's min-p cut
        "spare-nuclei-supports-skip-min-p",
        "SpareNuclei.supports",
        "w = np.where(w >= np.float32(self.sp.min_p) * peaks[row_of], w, np.float32(0.0))",
        "w = w",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # a cut through tied tokens keeps them in the device's order, not the lowest ids
        "spare-nuclei-cut-through-a-tie",
        "SpareNuclei.check_usable",
        "        self.usable &= self.w[rows, last] < self.w[rows, last - 1]\n",
        "",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # an undecided edge's race won by a token that may be cut
        "spare-nuclei-race-won-at-the-edge",
        "SpareNuclei.margin_race",
        "        kept = self.w[i, j] > self.w[i, least]",
        "        kept = True",
        ("tests/test_sampling_fast.py",),
    ),
    Mutant(  # re-runs never counted: wide passes never back off
        "backend-wide-reruns-uncounted",
        "LlamaCppRuntime.sampled_pass.read_row",
        "                    self.wide_odds.reran = True\n",
        "                    pass\n",
        (BACKEND_SAMPLING,),
    ),
    Mutant(  # the back-off never grows
        "wide-backoff-not-doubled",
        "WideOdds.wide_now",
        "self.backoff = min(2 * self.backoff, self.MAX_BACKOFF)",
        "self.backoff = min(self.backoff, self.MAX_BACKOFF)",
        (BACKEND_SAMPLING,),
    ),
    Mutant(  # sampled rows copied out of llama.cpp's buffer, as before BufferRows
        "llama-sampled-rows-copied",
        "LlamaCppRuntime.dists_on_device",
        "        return self.top_outputs  # reduced where the rows are, as forward_top's",
        "        return self.backend_sampling",
        ("tests/test_llamacpp.py",),
    ),
    Mutant(  # a row kept whole left in the buffer: the next pass overwrites a draft's q
        "buffer-rows-alone-not-copied",
        "row_dists.dist",
        "return token_dist(np.array(logits[i]) if copy_first else logits[i], sp)",
        "return token_dist(logits[i], sp)",
        ("tests/test_llamacpp.py",),
    ),
    Mutant(  # rows read after the next pass: its logits, not the step's
        "buffer-rows-unguarded",
        "PassRows.check",
        "        if self.valid is not None and not self.valid():\n",
        "        if False:\n",
        ("tests/test_llamacpp.py",),
    ),
    Mutant(  # greedy's top two tied: llama.cpp's column, not the lowest id (np.argmax's)
        "backend-greedy-tie-unseen",
        "LlamaCppRuntime.forward_top",
        "~(found.values[:, 0] > found.values[:, 1])",
        "found.values[:, 0] < found.values[:, 1]",
        (BACKEND_SAMPLING,),
    ),
    Mutant(  # a device's columns largest first with ties reversed (an unstable order)
        "columns-largest-first-ties-reversed",
        "largest_first",
        'order = np.argsort(-values, axis=1, kind="stable")',
        'order = np.argsort(values, axis=1, kind="stable")[:, ::-1]',
        (BACKEND_SAMPLING,),
    ),
    Mutant(  # greedy rows copied out of llama.cpp's buffer before their argmax, as before
        "llama-top-rows-copied",
        "LlamaCppRuntime.decode_in_place",
        "        return self.logits_buffer(n_rows)\n",
        "        return self.read_logits(n_rows)\n",
        ("tests/test_llamacpp.py",),
    ),
    Mutant(  # a draft's confidence left out where llama.cpp reads its rows in place
        "llama-top-rows-without-prob",
        "LlamaCppRuntime.forward_top",
        "return top_of(self.decode_in_place(tokens, last_only), with_prob)",
        "return top_of(self.decode_in_place(tokens, last_only), False)",
        ("tests/test_llamacpp.py",),
    ),
    Mutant(  # SpecForge's eagle_config ids name layer outputs: written + 1
        "eagle3-nested-ids-not-shifted",
        "edgespec.export.eagle3_layouts:layer_ids",
        "from_nested = None if nested is None else [i + 1 for i in nested]",
        "from_nested = None if nested is None else list(nested)",
        ("tests/test_eagle3_layouts.py", "tests/test_eagle3_convert.py"),
    ),
    Mutant(  # an unknown config field dropped unread instead of refused
        "eagle3-unknown-field-ignored",
        "edgespec.export.eagle3_layouts:check_field",
        "        raise unknown_field(path, shown)\n",
        "        return\n",
        ("tests/test_eagle3_layouts.py",),
    ),
    Mutant(  # speculators' layers.0.* left under their own names
        "eagle3-speculators-prefix-kept",
        "edgespec.export.eagle3_layouts:PREFIXES",
        '("layers.0.", "midlayer."), ',
        "",
        ("tests/test_eagle3_layouts.py",),
    ),
    Mutant(  # transformers 5's rope_parameters.rope_theta ignored (10,000 instead)
        "eagle3-rope-parameters-theta-ignored",
        "edgespec.export.eagle3_layouts:rope",
        'out["rope_theta"] = theta if theta is not None else out["rope_theta"]',
        "pass",
        ("tests/test_eagle3_layouts.py",),
    ),
    Mutant(  # a pickle's global resolved by the stock unpickler (runs code)
        "torch-bin-any-global",
        "edgespec.export.torch_bin:TensorsOnly.find_class",
        '            raise pickle.UnpicklingError(f"it asks for {module}.{name}")\n',
        "            return super().find_class(module, name)\n",
        ("tests/test_eagle3_layouts.py",),
    ),
    Mutant(  # the ONNX head assumes head_dim = n_embd / n_head
        "eagle3-onnx-head-dim-derived",
        "edgespec.export.eagle3_onnx:head_info",
        'head_dim=int(meta["head_dim"] or int(n_embd) // meta["n_head"]),',
        'head_dim=int(n_embd) // meta["n_head"],',
        ("tests/test_eagle3_layouts.py",),
    ),
    Mutant(  # another build's spelling copied as it is
        "eagle3-gguf-not-respelled",
        "edgespec.export.eagle3_gguf:vendored_spelling",
        'name}", OTHER_KEYS, OTHER_TENSORS)',
        'name}", {}, {})',
        ("tests/test_eagle3_layouts.py",),
    ),
    Mutant(  # EAGLE-3.1's per-feature norm not applied before llama.cpp's fc
        "eagle31-fc-norm-skipped",
        "edgespec.runtimes.llama_heads:EagleHead.encode",
        "        if self.fc_norm is not None:",
        "        if False:",
        ("tests/test_eagle3_layouts.py",),
    ),
    Mutant(  # EAGLE-3.1's carried state left pre-norm (EAGLE-3's)
        "eagle31-carries-prenorm-state",
        "edgespec.runtimes.llama_heads:EagleHead.decode",
        "        if self.norm_output is not None:\n",
        "        if False:\n",
        ("tests/test_eagle3_layouts.py",),
    ),
    Mutant(  # fc_norm's weights written in another order than the features'
        "eagle31-fc-norm-order",
        "edgespec.export.eagle3_convert:eagle31_metadata",
        "for i in range(3)])",
        "for i in (1, 0, 2)])",
        ("tests/test_eagle3_layouts.py",),
    ),
    Mutant(  # the carried state through the hidden norm, not the head's final norm
        "eagle31-carried-through-wrong-norm",
        "edgespec.export.eagle3_convert:eagle31_metadata",
        'weights["norm.weight"]',
        'weights["midlayer.hidden_norm.weight"]',
        ("tests/test_eagle3_layouts.py",),
    ),
    Mutant(  # fc_norm and norm_before_fc together converted (both norms applied)
        "eagle31-both-fc-norms-accepted",
        "edgespec.export.eagle3_convert:read_head",
        'if config.get("fc_norm") and config.get("norm_before_fc"):',
        "if False:",
        ("tests/test_eagle3_layouts.py",),
    ),
    Mutant(  # a real head's fc_norm (over 2,048 weights) read as its length only
        "eagle31-long-array-truncated",
        "edgespec.runtimes.gguf_meta:HeaderReader.value",
        "if n > 4 * MAX_LAYERS and not whole:",
        "if n > 4 * MAX_LAYERS:",
        ("tests/test_eagle3_layouts.py",),
    ),
    Mutant(  # the ONNX head's encode graph without fc_norm's nodes
        "eagle31-onnx-fc-norm-skipped",
        "edgespec.export.eagle3_onnx:encode_graph",
        "    if fc_norm is not None:",
        "    if False:",
        ("tests/test_eagle3_layouts.py",),
    ),
    Mutant(  # the ONNX head carries the pre-norm state for a norm_output head
        "eagle31-onnx-carries-prenorm-state",
        "edgespec.export.eagle3_onnx:decode_graph",
        "carried = normed if carry_normed else out",
        "carried = out",
        ("tests/test_eagle3_layouts.py",),
    ),
    Mutant(  # a FIFO, a device or a folder read as a JSON file (a FIFO hung the stores)
        "json-reads-what-is-no-file",
        "jsonfile:read_json",
        "if kind != stat.S_IFREG:",
        "if kind == stat.S_IFDIR:",
        ("tests/test_json_files.py",),
    ),
    Mutant(
        "json-reads-past-its-cap",
        "jsonfile:read_json",
        "    if len(data) > max_bytes:",
        "    if False:",
        ("tests/test_json_files.py",),
    ),
    Mutant(
        "json-integers-unbounded",
        "bounded_int",
        "    if n > MAX_INT_DIGITS:",
        "    if False:",
        ("tests/test_json_files.py",),
    ),
    Mutant(  # head.json's d2t ids beyond the vocabulary indexed past the logits row
        "head-json-ids-unbounded",
        "check_d2t",
        "if not (is_id(i) and i < n_vocab)",
        "if not is_id(i)",
        ("tests/test_onnx_head.py::test_a_hostile_head_json_is_refused_in_one_line",),
    ),
    Mutant(  # a head's GGUF handed to llama.cpp unchecked: it aborts the process
        "head-gguf-unchecked",
        "HeadFeatures.open_head",
        "        check_eagle_head(Path(path), self.n_ctx, on_cpu=not self.n_gpu_layers)\n",
        "",
        (
            "tests/test_hostile_metadata.py::test_head_metadata_llama_cpp_would_abort_or_hang_on_is_refused",
        ),
    ),
    Mutant(
        "head-blocks-not-matched-to-tensors",
        "check_eagle_head",
        '    if blocks != {str(i) for i in range(number("block_count"))}:',
        "    if False:",
        (
            "tests/test_hostile_metadata.py::test_head_metadata_llama_cpp_would_abort_or_hang_on_is_refused",
        ),
    ),
    Mutant(  # an MTP layer without its tensors: llama.cpp aborts building its graph
        "mtp-tensors-unchecked",
        "mtp_problem",
        '            if f"blk.{il}.{name}" not in tensors:',
        "            if False:",
        (
            "tests/test_hostile_metadata.py::test_mtp_layers_llama_cpp_would_abort_on_are_refused_or_left_out",
        ),
    ),
    Mutant(  # a broken drafter ends the request instead of being dropped
        "drafter-failure-ends-the-run",
        "SpeculativeDecoder.guarded",
        "        except Exception as e:",
        "        except ArithmeticError as e:",
        (
            "tests/test_hostile_metadata.py::test_a_head_that_fails_at_run_time_is_dropped_and_the_target_answers",
        ),
    ),
    Mutant(  # run and serve read demo-target as a file name again
        "run-ignores-model-names",
        "model_args",
        "str(resolve_model(target))",
        "target",
        ("tests/test_cli.py",),
    ),
    Mutant(  # a first calibration sits silent again
        "calibration-unannounced",
        "cost_curve",
        "        announce(",
        "        (lambda line: None)(",
        ("tests/test_progress.py",),
    ),
    Mutant(  # a raw-text prompt goes through the chat template after all
        "bench-raw-text-as-chat",
        "Bench.prompt_tokens",
        "if prompt.text is not None:",
        "if False:",
        ("tests/test_bench.py",),
    ),
    Mutant(  # a line with both a chat and raw text is read as the chat
        "suite-both-kinds-accepted",
        "parse_line",
        '("messages" in obj) == ("prompt" in obj)',
        '"messages" not in obj and "prompt" not in obj',
        ("tests/test_suites.py",),
    ),
    Mutant(  # the Gemma wheels' chunks (data/NAME.gguf.partNN) are not found
        "fetch-demo-chunks-only",
        "DATA_PART",
        r"(\.bin|\.part\d+)",
        r"(\.bin)",
        ("tests/test_models.py",),
    ),
    Mutant(  # a family's q/k norms dropped
        "qk-norm-skipped",
        "onnx_export:attention",
        "if g.family.qk_norm:",
        "if False:",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # Gemma's norms scale by w, not 1 + w
        "gemma-norm-offset-dropped",
        "onnx_export:norm",
        " + np.float32(g.family.norm_offset)",
        "",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # a sliding layer sees one position fewer
        "sliding-window-one-short",
        "onnx_export:attention",
        'g.config["sliding_window"] if local else -1',
        'g.config["sliding_window"] - 1 if local else -1',
        ("tests/test_export_families.py",),
    ),
    Mutant(  # sliding layers rotate by the global base
        "local-layers-global-rope",
        "rope_configs",
        'config["rope_local_base_freq"]',
        'config["rope_theta"]',
        ("tests/test_export_families.py",),
    ),
    Mutant(  # embeddings not times sqrt(hidden_size)
        "gemma-embedding-unscaled",
        "onnx_export:build_decoder",
        "if g.family.embed_scale:",
        "if False:",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # Gemma's GeGLU computed as SwiGLU
        "geglu-as-swiglu",
        "gated_mlp",
        'g.family.gate == "gelu_tanh"',
        "False",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # a GGUF's 1 + w read as w
        "gguf-gemma-norms-shifted",
        "GgufWeights.read_rows",
        " - self.norm_offset",
        "",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # the TensorRT flavour's sliding layers see everything
        "standard-window-ignored",
        "StandardGraphBuilder.attend",
        "mask = self.mask_local if local else self.mask",
        "mask = self.mask",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # a Llama 3 GGUF's rope_freqs ignored again
        "gguf-rope-freqs-dropped",
        "gguf_rope_scaling",
        '{"rope_type": GGUF_FREQ_FACTORS, "factors": read_factors(path, freqs)}',
        "None",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # SentencePiece merges lowest score first
        "spm-merges-reversed",
        "merges_by_score",
        "found.sort()",
        "found.sort(reverse=True)",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # Phi-3's gate_up_proj read up first
        "phi3-gate-up-swapped",
        "FUSED_PARTS",
        '"mlp.gate_up_proj.weight": HF_LAYER_TENSORS[13:15],',
        '"mlp.gate_up_proj.weight": HF_LAYER_TENSORS[13:15][::-1],',
        ("tests/test_export_families.py",),
    ),
    Mutant(  # a Phi-3 GGUF's longrope factor tensors ignored
        "gguf-longrope-dropped",
        "gguf_rope_scaling",
        'if kind in (None, "none") and "rope_factors_short.weight" in by_name:',
        "if False:",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # Phi-4 mini's remote-code biases exported without them
        "phi3-biases-not-refused",
        "families:FAMILIES",
        'fused=True, refused=("lm_head_bias", "mlp_bias"),',
        "fused=True,",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # the TensorRT flavour turns the whole head under a partial rotary factor
        "standard-partial-rotary-whole-head",
        "StandardGraphBuilder.rotate",
        "if 2 * half < self.head_dim:",
        "if False:",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # longrope's short factors left out
        "longrope-short-factors-dropped",
        "scale_inv_freq",
        "return inv_freq / short_factors(scaling, len(inv_freq))",
        "return inv_freq",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # longrope's context kept past its original one, where the long factors rule
        "longrope-context-not-cut",
        "context_limit",
        'limit = config.get("original_max_position_embeddings")',
        "limit = None",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # Phi-4 mini's partial rotary turned into a whole-head one
        "partial-rotary-ignored",
        "rotary_dim",
        'float(config.get("partial_rotary_factor", 1.0))',
        "1.0",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # longrope's attention factor on cos and sin left out
        "longrope-attention-factor-dropped",
        "rope_caches",
        "scale = attention_factor(config)",
        "scale = 1.0",
        ("tests/test_export_families.py",),
    ),
    Mutant(  # uvicorn's signal handling again: its re-raised Ctrl-C lands inside the loop
        "serve-uvicorn-signals",
        "SignalledServer.capture_signals",
        "        yield  #",
        "        with super().capture_signals():\n            yield\n        #",
        ("tests/test_serve_shutdown.py",),
    ),
    Mutant(  # a second Ctrl-C while a request is in flight changes nothing
        "serve-second-signal-ignored",
        "SignalledServer.drop_when_asked",
        "            connection.transport.abort()",
        "            pass",
        ("tests/test_serve_shutdown.py",),
    ),
    Mutant(  # a server stopped by a signal exits 0
        "serve-signal-exits-0",
        "SignalledServer.exit_code",
        "128 + self.first_signal",
        "0",
        ("tests/test_serve_shutdown.py",),
    ),
    Mutant(  # model.json's eos_id one past the vocabulary indexes past a logits row
        "model-json-ids-unbounded",
        "check_special_ids",
        'token >= info["n_vocab"]',
        'token > info["n_vocab"]',
        ("tests/test_hostile_json_readers.py",),
    ),
    Mutant(  # a FIFO named model.json taken for no model folder: a misleading refusal
        "model-folder-needs-a-regular-model-json",
        "is_model_folder",
        '(path / "model.json").exists()',
        '(path / "model.json").is_file()',
        ("tests/test_hostile_json_readers.py",),
    ),
    Mutant(  # offsets as strings reached the reads: a TypeError traceback
        "safetensors-offsets-untyped",
        "tensor_entry",
        "len(offsets) == 2 and all(map(is_count, offsets))",
        "len(offsets) == 2",
        ("tests/test_hostile_json_readers.py",),
    ),
    Mutant(  # a header length within the file but past the format's bound read whole
        "safetensors-header-unbounded",
        "read_safetensors_header",
        "        if header_len > SAFETENSORS_MAX_HEADER:",
        "        if False:",
        ("tests/test_hostile_json_readers.py",),
    ),
    Mutant(  # a scalar fc.weight indexed for its width: an IndexError traceback
        "fc-weight-shape-unchecked",
        "HeadShape.of",
        'if len(weights.shape("fc.weight")) != 2:',
        "if False:",
        ("tests/test_hostile_json_readers.py",),
    ),
    Mutant(  # an engine plan sized by a missing context_length: a TypeError traceback
        "trt-plan-context-unchecked",
        "plan_engine",
        'if info.get("context_length") is None:',
        "if False:",
        ("tests/test_hostile_json_readers.py",),
    ),
)


def package_dirs() -> dict[str, str]:
    """pyproject's [tool.setuptools] package-dir: import name -> folder in the repository."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return config["tool"]["setuptools"]["package-dir"]


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the packages: dotted name -> file (folders without __init__.py, such
    as bench data, are not modules)."""
    modules: dict[str, Path] = {}
    for package, folder in package_dirs().items():
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            if not all(
                (base / Path(*parts[:i]) / "__init__.py").is_file() for i in range(len(parts))
            ):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules.setdefault(".".join((package, *parts)), path)
    return modules


def definitions_in(tree: ast.Module, text: str) -> list[tuple[str, int, int]]:
    """(qualname, start, end) of every def and class at any depth (qualname joins the
    enclosing defs' names with dots) and every module-level assignment to a plain name."""
    line_starts = [0]
    for line in text.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    found = []

    def span(node: ast.stmt) -> tuple[int, int]:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return line_starts[first - 1], line_starts[
            min(node.end_lineno or node.lineno, len(line_starts) - 1)
        ]

    def walk(nodes: Iterable[ast.AST], prefix: str, top: bool) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.append((prefix + node.name, *span(node)))
                walk(node.body, prefix + node.name + ".", False)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                if top:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        for name in ast.walk(target):
                            if isinstance(name, ast.Name):
                                found.append((name.id, *span(node)))
            elif isinstance(node, (ast.stmt, ast.excepthandler, ast.match_case)):
                walk(ast.iter_child_nodes(node), prefix, top)

    walk(tree.body, "", True)
    return found


def definitions(root: Path = ROOT) -> tuple[list[Definition], dict[str, str]]:
    """Every definition in the packages under root, and each file's text by repository path."""
    defs, texts = [], {}
    for module, path in module_files(root).items():
        rel = path.relative_to(root).as_posix()
        texts[rel] = text = path.read_text()
        for qualname, start, end in definitions_in(ast.parse(text, rel), text):
            defs.append(Definition(module, qualname, rel, start, end))
    return defs, texts


def find_definition(where: str, defs: list[Definition]) -> Definition | str:
    """The one definition `where` names, or why there is not exactly one."""
    module, _, qualname = where.rpartition(":")
    hits = [
        d
        for d in defs
        if d.qualname == qualname
        and (not module or d.module == module or d.module.endswith("." + module))
    ]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        return f"{where!r} is defined nowhere in the packages"
    places = ", ".join(f"{d.module}:{d.qualname}" for d in hits)
    return f"{where!r} is defined {len(hits)} times ({places}): qualify it as MODULE:{qualname}"


def resolve(
    mutants: list[Mutant], root: Path = ROOT
) -> tuple[dict[str, tuple[str, int]], list[str]]:
    """Each mutant's file and the snippet's offset there, and the anchors that do not resolve."""
    defs, texts = definitions(root)
    found, problems = {}, []
    for m in mutants:
        d = find_definition(m.where, defs)
        if isinstance(d, str):
            problems.append(f"{m.name}: {d}")
            continue
        segment = texts[d.path][d.start : d.end]
        count = segment.count(m.old)
        if count != 1:
            what = "snippet not found" if count == 0 else f"snippet found {count} times"
            problems.append(f"{m.name}: {what} in {m.where} ({d.path})")
            continue
        found[m.name] = (d.path, d.start + segment.index(m.old))
    return found, problems


def make_scratch(scratch: Path) -> tuple[Path, Path]:
    """Copy the package (as installed), the tests, the bench scripts some tests load
    (tests/bench_scripts.py) and the docs (the recorded runs replay tests read); return
    (import root, test root)."""
    site, repo = scratch / "site", scratch / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    # parents first, so edgespec/ exists before edgespec/runtimes/ is copied into it
    for name, folder in sorted(package_dirs().items(), key=lambda item: item[0].count(".")):
        shutil.copytree(ROOT / folder, site / name.replace(".", "/"), ignore=ignore)
    for folder in ("tests", "bench", "docs"):
        shutil.copytree(ROOT / folder, repo / folder, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", repo / "pyproject.toml")
    return site, repo


def scratch_path(site: Path, repo_path: str) -> Path:
    """Where a repository file lives in the scratch import tree."""
    for name, folder in sorted(package_dirs().items(), key=lambda item: -len(item[1])):
        if repo_path.startswith(folder.rstrip("/") + "/"):
            return site / name.replace(".", "/") / repo_path[len(folder.rstrip("/")) + 1 :]
    raise SystemExit(f"{repo_path} is in no package of pyproject's package-dir")


def run_tests(
    site: Path, repo: Path, tests: tuple[str, ...], every: bool = False, limit_s: int | None = None
) -> subprocess.CompletedProcess:
    """pytest on the scratch copy; stop at the first failure unless every one is wanted."""
    env = dict(os.environ, PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", *PYTEST, *([] if every else ["-x"]), *tests]
    return subprocess.run(
        cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=limit_s or TIME_LIMIT_S
    )


def check_imports_from(site: Path, repo: Path) -> None:
    """The tests must import the scratch copy, not the editable install."""
    env = dict(os.environ, PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1")
    code = "import edgespec.engine, edgespec.verify; print(edgespec.engine.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True
    )
    if not out.stdout.strip().startswith(str(site)):
        raise SystemExit(f"edgespec was imported from {out.stdout.strip()!r}, not {site}")


def failures(output: str) -> str:
    """The failing tests pytest's short summary names, comma-separated."""
    hits = re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.M)
    return ", ".join(hits) if hits else "(no test named)"


def try_mutant(
    m: Mutant, at: tuple[str, int], site: Path, repo: Path, every: bool
) -> tuple[str, str]:
    """Apply m at (file, offset) of the scratch copy, run its tests, restore; return (verdict,
    evidence)."""
    path, offset = scratch_path(site, at[0]), at[1]
    original = path.read_text()
    assert original[offset : offset + len(m.old)] == m.old, f"{m.name}: scratch copy differs"
    path.write_text(original[:offset] + m.new + original[offset + len(m.old) :])
    try:
        done = run_tests(site, repo, m.tests, every)
    except subprocess.TimeoutExpired:
        return "killed", f"tests ran past {TIME_LIMIT_S} s"
    finally:
        path.write_text(original)
    if done.returncode == 1:
        return "killed", failures(done.stdout)
    if done.returncode == 0:
        return "SURVIVED", "all of " + " ".join(m.tests) + " passed"
    return "killed", f"pytest exit {done.returncode}: {failures(done.stdout)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--every", action="store_true", help="name every failing test")
    parser.add_argument(
        "--check", action="store_true", help="only report the anchors that do not resolve"
    )
    args = parser.parse_args(argv)
    known = {m.name: m for m in MUTANTS}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        print(f"unknown mutant {unknown[0]!r}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    chosen = [known[n] for n in args.names] if args.names else list(MUTANTS)
    if args.list:
        for m in chosen:
            print(f"{m.name:<30} {m.where:<28} {' '.join(m.tests)}")
        return 0
    found, problems = resolve(chosen)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        print(f"{len(problems)} of {len(chosen)} anchors do not resolve", file=sys.stderr)
        return 2
    if args.check:
        print(f"all {len(chosen)} anchors resolve")
        return 0
    with tempfile.TemporaryDirectory(prefix="edgespec-mutants-") as tmp:
        site, repo = make_scratch(Path(tmp))
        check_imports_from(site, repo)
        # the baseline runs every chosen mutant's tests at once: on 2 slow cores, past 300 s
        tests = tuple(sorted({t for m in chosen for t in m.tests}))
        baseline = run_tests(site, repo, tests, limit_s=4 * TIME_LIMIT_S)
        if baseline.returncode != 0:
            print(baseline.stdout[-3000:], file=sys.stderr)
            print("the unmutated tests fail: fix them before judging mutants", file=sys.stderr)
            return 2
        rows = []
        for m in chosen:
            verdict, evidence = try_mutant(m, found[m.name], site, repo, args.every)
            rows.append((m.name, m.where, verdict, evidence))
            print(f"{m.name:<30} {verdict}", file=sys.stderr, flush=True)
    print_table(rows)
    return 1 if any(verdict == "SURVIVED" for _, _, verdict, _ in rows) else 0


def print_table(rows: list[tuple[str, str, str, str]]) -> None:
    header = ("mutant", "where", "result", "failing tests")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[3])
    n_killed = sum(verdict == "killed" for _, _, verdict, _ in rows)
    print(f"{n_killed} of {len(rows)} mutants killed")


if __name__ == "__main__":
    sys.exit(main())
