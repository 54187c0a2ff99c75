from edgespec.drafters import NgramDrafter, Offer
from edgespec.sampling import SamplingParams

SP = SamplingParams()


def test_longest_suffix_match_proposes_its_continuation():
    d = NgramDrafter(max_ngram=3)
    ctx = [1, 2, 3, 4, 5, 9, 9, 2, 3]
    draft = d.propose(ctx, 3, SP)
    assert draft.tokens.tolist() == [4, 5, 9]
    assert draft.q is None
    assert d.match_len == 2


def test_no_match_gives_an_empty_draft():
    d = NgramDrafter()
    assert d.propose([1, 2, 3, 4], 4, SP).tokens.tolist() == []
    assert d.offer([1, 2, 3, 4]) == Offer(0, key=0)


def test_offer_names_what_a_proposal_would_hold_keyed_by_match_length():
    d = NgramDrafter(max_ngram=3)
    ctx = [1, 2, 3, 4, 5, 9, 9, 2, 3]
    # 4 5 9 9 2 3 after "2 3", previewed: what a proposal of any k up to 16 would begin with
    assert d.offer(ctx) == Offer(available=6, key=2, behind=0, preview=(4, 5, 9, 9, 2, 3))
    assert d.propose(ctx, 3, SP).tokens.tolist() == [4, 5, 9]  # the offer changed nothing


def test_a_preview_holds_the_first_16_tokens_of_a_long_continuation():
    d = NgramDrafter(max_ngram=2)
    ctx = [1, 2, *range(100, 130), 1, 2]
    offer = d.offer(ctx)
    assert (offer.available, offer.key) == (32, 2)
    assert offer.preview == tuple(range(100, 116))
    assert d.propose(ctx, 16, SP).tokens.tolist() == list(offer.preview)


def test_latest_occurrence_wins_and_proposal_is_capped_by_what_exists():
    d = NgramDrafter(max_ngram=2)
    ctx = [7, 8, 1, 7, 8, 2, 7, 8]
    assert d.propose(ctx, 5, SP).tokens.tolist() == [2, 7, 8]


def test_following_the_copied_source_beats_a_later_occurrence():
    d = NgramDrafter(max_ngram=1)
    source = [10, 5, 11, 12, 5, 13]  # "5" is followed by 11 here and by 13 later
    ctx = [*source, 99, 10, 5]
    assert d.propose(ctx, 2, SP).tokens.tolist() == [13, 99]  # plain lookup: latest "5"
    d = NgramDrafter(max_ngram=2)
    ctx = [*source, 99, 10, 5]
    assert d.propose(ctx, 1, SP).tokens.tolist() == [11]  # the 2-gram (10, 5) -> 11
    ctx += [11]  # accepted: the text follows the source
    assert d.propose(ctx, 3, SP).tokens.tolist() == [12, 5, 13]
    assert d.match_len == d.following


def test_a_new_context_resets_the_index():
    d = NgramDrafter()
    d.propose([1, 2, 1, 2], 2, SP)
    assert d.propose([5, 6, 5], 2, SP).tokens.tolist() == [6, 5]


def test_one_growing_context_list_is_indexed_as_fresh_copies_would_be():
    """The engine appends to one list per request; the drafter indexes only what was appended
    to it (not re-checking its start), and offers what a drafter handed a fresh copy offers."""
    import numpy as np

    tokens = np.random.default_rng(0).integers(0, 6, size=120).tolist()
    grown, fresh = NgramDrafter(), NgramDrafter()
    context = tokens[:10]
    for t in tokens[10:]:
        assert grown.offer(context) == fresh.offer(list(context))
        context.append(t)
    assert grown.indexed == tokens[:-1] and grown.synced is context
    other = [9, 7, 8, *[9] * 130, 7]  # a new list, longer than what was indexed
    assert (
        grown.offer(other)
        == NgramDrafter().offer(other)
        == Offer(132, key=2, preview=(8,) + (9,) * 15)
    )
