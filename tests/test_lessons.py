"""What the controller learned of its drafters, kept between processes (edgespec/lessons.py):
each test's AdaptivePolicy stands for a process, the store on disk for what outlives it."""

from __future__ import annotations

import json
import logging

import pytest

from edgespec.controller import AdaptivePolicy, CostCurve, lessons
from edgespec.controller.acceptance import ByMatchLength, ByPosition
from edgespec.controller.lessons import KEPT_OUTCOMES, Lesson, LessonStore, lessons_path
from edgespec.drafters import NgramDrafter
from edgespec.engine import SpeculativeDecoder
from tests.cli_subprocess import run_edgespec
from tests.fakes import FakeRuntime, ScriptedDrafter

NAN = float("nan")
CURVE = [1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12, 1.14, 1.16]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    monkeypatch.setattr(lessons, "_warned", set())
    return tmp_path


def test_a_draft_models_outcomes_recalled_elsewhere_start_the_same_estimates():
    first = ByPosition()
    for kept in (3, 0, 2, 1):
        first.observe(0, 3, kept, unsure_end=kept == 2)
    assert first.outcomes() == {"sure": (6, 8), "unsure": (0, 1), "goes_on": (11, 12)}
    first.next_request()
    other = ByPosition()
    other.recall(first.outcomes())
    assert other.alphas(0, 2) == first.alphas(0, 2)
    assert other.continues(0, 2) == first.continues(0, 2)
    assert other.sure == [pytest.approx((6 + 0.6 * 20) / (8 + 20))]  # PRIOR_TOKENS: 20
    assert other.gain(0) == first.gain(0) == 1 / (2 + 9 + 1)  # as cold as the first's


def test_prompt_lookups_outcomes_are_recalled_by_match_length_others_passed_over():
    first = ByMatchLength()
    first.observe(1, 2, 0)
    first.observe(5, 4, 4)
    assert first.outcomes() == {"1": (0, 1), "5": (4, 4)}
    other = ByMatchLength()
    other.recall({**first.outcomes(), "0": (9, 9), "x": (1, 1), "²": (1, 1), "-3": (1, 1),
                  "9" * 5000: (1, 1)})  # fmt: skip
    assert other.tallies.keys() == {1, 5}
    assert [other.rate(key) for key in (1, 5, 2)] == [
        pytest.approx(0.2 * 5 / 6),
        pytest.approx((4 + 0.8 * 5) / 9),
        0.4,  # never judged: its prior
    ]


def one_request(policy: AdaptivePolicy, drafter: ScriptedDrafter, kept: list[int]) -> None:
    """A request whose steps draft 2 tokens each and keep these many: the loop's calls."""
    policy.begin([drafter], max_tokens=64)
    for n in kept:
        policy.observe(drafter, 2, n, t_draft=0.02, t_verify=1.04, t_first=0.012)
    policy.end()


def test_a_later_process_starts_a_drafter_where_the_last_left_it(home):
    rt = FakeRuntime(n_vocab=16)
    first, drafted = (
        AdaptivePolicy(CostCurve(CURVE), store=LessonStore("pair A")),
        ScriptedDrafter(rt, None),
    )
    one_request(first, drafted, [2, 2, 0, 2, 1, 2, 2, 2, 2])
    [entry] = json.loads(lessons_path().read_text()).values()
    learned = first.estimates[0]
    assert entry["drafters"]["scripted"] == {
        "judged": 18, "outcomes": {"sure": [15, 17], "unsure": [0, 0], "goes_on": [18, 18]},
        "first_ratio": learned.first_s / learned.token_s,
    }  # fmt: skip
    assert learned.first_s > learned.token_s  # learned: 0.011 s and 0.009 s
    first.begin([drafted])  # this process's next request, for reference
    later = AdaptivePolicy(CostCurve(CURVE), store=LessonStore("pair A"))
    drafter = ScriptedDrafter(rt, None)
    later.begin([drafter])
    e = later.estimate(drafter)
    assert e.acceptance.alphas(0, 3) == first.estimates[0].acceptance.alphas(0, 3)
    assert e.acceptance.alphas(0, 1) == [pytest.approx((15 + 0.6 * 20) / (17 + 20))]
    assert (e.judged, e.trial) == (18, False)  # judged already: tried no more
    # the price starts at the calibration's, a first token's relative to it as learned
    assert (e.token_s, e.first_s) == (0.01, 0.01 * learned.first_s / learned.token_s)
    elsewhere = AdaptivePolicy(CostCurve(CURVE), store=LessonStore("pair B"))
    elsewhere.begin([drafter])
    e = elsewhere.estimate(drafter)
    assert (e.acceptance.alphas(0, 1), e.judged, e.trial) == ([0.6], 0, True)


def test_what_a_process_keeps_adds_to_what_it_recalled_capped(home):
    rt = FakeRuntime(n_vocab=16)
    store = LessonStore("pair")
    store.keep({"scripted": Lesson(5000, {"sure": (1900, 2000), "unsure": (0, 0),
                                          "goes_on": (2000, 2000)})})  # fmt: skip
    policy = AdaptivePolicy(CostCurve(CURVE), store=LessonStore("pair"))
    one_request(policy, ScriptedDrafter(rt, None), [0] * 10)  # 10 outcomes, none kept
    entry = json.loads(lessons_path().read_text())["pair"]["drafters"]["scripted"]
    assert entry["judged"] == 5020
    # 1900 of 2010 judged, scaled to KEPT_OUTCOMES with the rate kept
    assert entry["outcomes"]["sure"] == [round(1900 * KEPT_OUTCOMES / 2010), KEPT_OUTCOMES]


def test_a_long_lived_process_writes_its_lessons_at_most_every_thirty_seconds(home, monkeypatch):
    clock = iter([100.0, 110.0, 131.0])
    monkeypatch.setattr(lessons.time, "monotonic", lambda: next(clock))
    store = LessonStore("pair")
    for judged in (1, 2, 3):
        store.keep({"ngram": Lesson(judged, {})})
        written = json.loads(lessons_path().read_text())["pair"]["drafters"]["ngram"]["judged"]
        assert written == {1: 1, 2: 1, 3: 3}[judged]  # 10 s after the first: not yet


@pytest.mark.parametrize(
    "content, why",
    [
        (b"\0" * 64, "is not valid JSON (Expecting value: line 1 column 1 (char 0))"),
        (b"[1, 2]", "is not a JSON object (a list)"),
        (b"\xff{}", "is not UTF-8 text"),
        (b"[" * 100_000, "is nested deeper than JSON is read"),
        (b'{"pair": ' + b"7" * 100_000 + b"}", "holds an integer of 100,000 digits"),
        (b" " * (lessons.STORE_MAX_BYTES + 1), f"is larger than {lessons.STORE_MAX_BYTES:,} bytes"),
    ],
    ids=["zeros", "array", "not utf-8", "nested", "long integer", "too large"],
)  # fmt: skip
def test_a_corrupt_store_is_ignored_once_and_written_afresh(home, caplog, content, why):
    lessons_path().write_bytes(content)
    store = LessonStore("pair")
    with caplog.at_level(logging.WARNING, "edgespec.controller.lessons"):
        assert store.recall() == {}
        assert LessonStore("other").recall() == {}
    assert caplog.messages == [
        f"ignoring the lessons store {lessons_path()}: it {why}; the drafters start from their "
        "priors"
    ]
    store.keep({"ngram": Lesson(4, {"3": (2, 4)})})
    assert LessonStore("pair").recall() == {"ngram": Lesson(4, {"3": (2, 4)})}


@pytest.mark.parametrize(
    "entry, why",
    [
        ({"version": 0, "drafters": {}}, "not a version 1 entry"),
        ({"version": 1, "drafters": []}, "drafters is not an object"),
        ({"version": 1, "drafters": {"ngram": {"judged": -1, "outcomes": {}}}},
         "ngram: judged is not a count"),
        ({"version": 1, "drafters": {"ngram": {"judged": True, "outcomes": {}}}},
         "ngram: judged is not a count"),
        ({"version": 1, "drafters": {"model": {"judged": 3, "outcomes": {"sure": [5, 4]}}}},
         "model: outcomes['sure'] is not [kept, judged] with kept <= judged <= 2000"),
        ({"version": 1, "drafters": {"model": {"judged": 3, "outcomes": {"sure": [1, 1e9]}}}},
         "model: outcomes['sure'] is not [kept, judged] with kept <= judged <= 2000"),
        ({"version": 1, "drafters": {"model": {"judged": 3, "outcomes": {"sure": [1]}}}},
         "model: outcomes['sure'] is not [kept, judged] with kept <= judged <= 2000"),
        ({"version": 1, "drafters": {"model": {"judged": 3, "outcomes": {}, "first_ratio": 0}}},
         "model: first_ratio is not a number from 0.01 to 100.0"),
        ({"version": 1, "drafters": {"model": {"judged": 3, "outcomes": {},
                                               "first_ratio": NAN}}},
         "model: first_ratio is not a number from 0.01 to 100.0"),
        ({"version": 1, "drafters": {"ngram": {"judged": 3,
                                               "outcomes": {str(n): [0, 1] for n in range(65)}}}},
         "ngram: more than 64 outcome counts"),
    ],
    ids=["version", "drafters", "negative", "bool", "kept > judged", "float", "short",
         "zero ratio", "NaN ratio", "counts"],
)  # fmt: skip
def test_an_impossible_entry_is_ignored_with_what_is_wrong_the_others_kept(
    home, caplog, entry, why
):
    good = {"version": 1, "time": 1.0, "drafters": {"ngram": {"judged": 2, "outcomes": {}}}}
    lessons_path().write_text(json.dumps({"pair": entry, "other": good}))
    with caplog.at_level(logging.WARNING, "edgespec.controller.lessons"):
        assert LessonStore("pair").recall() == {}
    assert caplog.messages == [
        f"ignoring the lessons stored in {lessons_path()} for these models ({why}); the "
        "drafters start from their priors"
    ]
    LessonStore("pair").keep({"ngram": Lesson(1, {})})
    assert LessonStore("other").recall() == {"ngram": Lesson(2, {})}
    assert LessonStore("pair").recall() == {"ngram": Lesson(1, {})}


def test_a_store_that_cannot_be_written_is_reported_once(home, caplog, monkeypatch):
    (home / "file").write_text("")
    monkeypatch.setenv("EDGESPEC_HOME", str(home / "file" / "home"))  # under a file: no folder
    with caplog.at_level(logging.WARNING, "edgespec.controller.lessons"):
        store = LessonStore("pair")
        store.keep({"ngram": Lesson(1, {})})
        store.keep({"ngram": Lesson(2, {})}, force=True)
    assert caplog.messages == [
        f"cannot store what the drafters learned in {lessons_path()} ([Errno 20] Not a "
        f"directory: '{home / 'file' / 'home'}')"
    ]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny target and draft GGUFs (llama.cpp)."""
    pytest.importorskip("llama_cpp")
    from tests.tiny_gguf import build_tiny_pair

    folder = tmp_path_factory.mktemp("models")
    build_tiny_pair(folder)
    return folder


def tiny_run(tmp_path, tiny, *more: str) -> dict:
    """`edgespec run --json` on the tiny pair, a process of its own, its home tmp_path/home."""
    done = run_edgespec(
        tmp_path, "run", "--target", str(tiny / "tiny-target.gguf"), "--draft",
        str(tiny / "tiny-draft.gguf"), "--prompt", "hi", "--max-tokens", "8", "--n-ctx", "256",
        "--json", *more, models=tiny,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_edgespec_run_starts_its_drafters_from_what_earlier_runs_kept(tmp_path, tiny):
    """The store holds each run's lessons under the tune store's key (models, runtime,
    device); a later run starts from them: planted, a draft model always wrong (2,000 of
    2,000 rejected) is not tried, and what the run adds sums onto them. --no-lessons reads
    and writes nothing. The answer is the same whatever was learned."""
    first = tiny_run(tmp_path, tiny)
    home = tmp_path / "home"
    [key] = json.loads((home / "tune.json").read_text())
    drafters = json.loads((home / "lessons.json").read_text())[key]["drafters"]
    assert drafters.keys() == {"model", "ngram"}
    judged = sum(lesson["judged"] for lesson in drafters.values())
    assert judged == first["stats"]["n_draft_tokens"]
    wrong = {"judged": 5000, "outcomes": {"sure": [0, 2000], "unsure": [0, 0],
                                         "goes_on": [2000, 2000]}}  # fmt: skip
    planted = {key: {"version": 1, "time": 1.0, "drafters": {"model": wrong}}}
    (home / "lessons.json").write_text(json.dumps(planted))
    later = tiny_run(tmp_path, tiny)
    assert "model" not in later["stats"]["steps_by_drafter"]
    kept = json.loads((home / "lessons.json").read_text())[key]["drafters"]
    # never drafted: nothing added, no first token's price learned
    assert {key: kept["model"][key] for key in wrong} == wrong
    assert "first_ratio" not in kept["model"]
    assert kept["ngram"]["judged"] == later["stats"]["n_draft_tokens"]
    before = (home / "lessons.json").read_bytes()
    fresh = tiny_run(tmp_path, tiny, "--no-lessons")
    assert (home / "lessons.json").read_bytes() == before
    assert first["tokens"] == later["tokens"] == fresh["tokens"]


def test_the_store_keeps_the_pairs_written_last(home, monkeypatch):
    monkeypatch.setattr(lessons, "STORE_MAX_PAIRS", 2)
    times = iter([1.0, 2.0, 3.0])
    monkeypatch.setattr(lessons.time, "time", lambda: next(times))
    for key in ("old", "newer", "newest"):
        LessonStore(key).keep({"ngram": Lesson(1, {})})
    assert list(json.loads(lessons_path().read_text())) == ["newest", "newer"]


def test_the_loop_keeps_what_a_request_taught_whether_it_ends_or_is_closed_early(home):
    """The engine reports a request's end to its policy (Policy.end) however it ends: a
    generation run out, and a stream its reader closed after two events (a client gone)."""
    rt = FakeRuntime(n_vocab=16, n_ctx=600, seed=1)
    rt.eog = 999
    oracle = ScriptedDrafter(FakeRuntime(n_vocab=16, seed=1), None, name="oracle")
    policy = AdaptivePolicy(CostCurve(CURVE), store=LessonStore("pair"))
    decoder = SpeculativeDecoder(rt, [oracle, NgramDrafter()], policy)
    out = decoder.generate([1, 2, 3], max_tokens=40)
    kept = LessonStore("pair").recall()
    assert kept.keys() == {"oracle", "ngram"}
    assert sum(lesson.judged for lesson in kept.values()) == out.stats.n_draft_tokens
    lessons_path().unlink()
    policy.memory.store = LessonStore("pair")  # a fresh store writes at once
    stream = decoder.stream([1, 2, 3], max_tokens=40)
    next(stream), next(stream)
    stream.close()
    assert LessonStore("pair").recall().keys() == {"oracle", "ngram"}


def test_a_write_interrupted_leaves_the_store_as_it_was_and_no_temporary_file(home, monkeypatch):
    LessonStore("pair").keep({"ngram": Lesson(1, {})})
    before = lessons_path().read_bytes()

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(lessons.Path, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        LessonStore("pair").keep({"ngram": Lesson(2, {})})
    assert lessons_path().read_bytes() == before
    assert [p.name for p in home.iterdir()] == ["lessons.json"]


def test_lessons_held_back_by_the_thirty_seconds_are_written_as_the_process_exits(
    home, monkeypatch
):
    """A server stopped within 30 s of its last write loses nothing: what was held back is
    written at exit (atexit), and a write that comes first takes the exit's place."""
    registered: list = []
    monkeypatch.setattr(lessons.atexit, "register", registered.append)
    monkeypatch.setattr(lessons.atexit, "unregister", registered.remove)
    clock = iter([100.0, 110.0, 115.0, 116.0])
    monkeypatch.setattr(lessons.time, "monotonic", lambda: next(clock))
    store = LessonStore("pair")
    store.keep({"ngram": Lesson(1, {})})
    store.keep({"ngram": Lesson(2, {})})  # 10 s after: held back
    store.keep({"ngram": Lesson(3, {})})
    assert registered == [store.flush]  # once
    assert LessonStore("pair").recall() == {"ngram": Lesson(1, {})}
    registered[0]()  # the process exits
    assert LessonStore("pair").recall() == {"ngram": Lesson(3, {})}
    assert registered == []
    store.flush()  # nothing held back: nothing written
