"""Sampling: the request's parameters (params), the position-keyed noise (noise), the
distributions and their rules (dist), the Gumbel race (race), and what a back-end hands over
for a verify pass (rows; spare: a row decided from its largest logits)."""

from edgespec.sampling.dist import (
    TokenDist,
    min_p_support,
    sample,
    token_dist,
    top_k,
    top_k_dist,
    top_p_head,
)
from edgespec.sampling.noise import (
    all_ids,
    block_count,
    block_maxima,
    block_min_noise,
    block_of,
    block_tokens,
    exponential_noise,
    noise_offsets,
    row_noise_offsets,
    slot_of,
)
from edgespec.sampling.params import (
    CUTS,
    SAMPLERS,
    SamplingParams,
    in_range,
    request_params,
    span_text,
)
from edgespec.sampling.race import (
    COLUMN_ROWS,
    RACE_FRONT_MIN,
    divide_races,
    holder_entries,
    supports_race,
    tokens_of_blocks,
    upper_set,
)
from edgespec.sampling.rows import (
    PassRows,
    gumbel_max_rows,
    row_dists,
    top_k_probs,
    top_k_rows_of,
)
from edgespec.sampling.spare import (
    SpareNuclei,
    candidate_dist,
    spare_gumbel_maxes,
    spare_min_p_dist,
    spare_min_p_supports,
)

__all__ = [
    "CUTS",
    "SAMPLERS",
    "SamplingParams",
    "in_range",
    "request_params",
    "span_text",
    "all_ids",
    "block_count",
    "block_maxima",
    "block_min_noise",
    "block_of",
    "block_tokens",
    "exponential_noise",
    "noise_offsets",
    "row_noise_offsets",
    "slot_of",
    "COLUMN_ROWS",
    "RACE_FRONT_MIN",
    "divide_races",
    "holder_entries",
    "supports_race",
    "tokens_of_blocks",
    "upper_set",
    "TokenDist",
    "min_p_support",
    "sample",
    "token_dist",
    "top_k",
    "top_k_dist",
    "top_p_head",
    "SpareNuclei",
    "candidate_dist",
    "spare_gumbel_maxes",
    "spare_min_p_dist",
    "spare_min_p_supports",
    "PassRows",
    "gumbel_max_rows",
    "row_dists",
    "top_k_rows_of",
    "top_k_probs",
]
