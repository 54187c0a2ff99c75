"""The controller: which drafter drafts how many tokens at each step, and what it learns.

policy (the Policy protocol, FixedPolicy), pricing (the cost curve and a step's expected tokens
per second), estimates (what the policy knows of each drafter), acceptance (the per-drafter
acceptance estimates), switches (a change of width on one CUDA graph), probing (what losing
probes may cost), adaptive (AdaptivePolicy's decisions), lessons (what a process keeps for the
next), calibrate (measuring and storing cost curves; imported as edgespec.controller.calibrate:
it opens runtimes).
"""

from edgespec.controller.acceptance import ByMatchLength, ByPosition
from edgespec.controller.adaptive import (
    COLD_JUDGED,
    STAY_MARGIN,
    TRIAL_TOKENS,
    AdaptivePolicy,
)
from edgespec.controller.estimates import (
    SHADOW_JUDGED_AFTER,
    Estimate,
    Learned,
    Memory,
    Shadow,
    lesson_of,
    priors,
    taught,
)
from edgespec.controller.lessons import Lesson, LessonStore
from edgespec.controller.policy import FixedPolicy, Policy
from edgespec.controller.pricing import (
    MAX_PULL,
    Choice,
    CostCurve,
    Option,
    best_choice,
    draft_rates,
    draft_s,
    expected_tokens,
    followed,
    rate_bound,
)
from edgespec.controller.probing import PROBE_BUDGET, ProbeBudget
from edgespec.controller.switches import LEAVE_PLAIN_SWITCHES, Switches

__all__ = [
    "COLD_JUDGED", "LEAVE_PLAIN_SWITCHES", "MAX_PULL", "PROBE_BUDGET", "SHADOW_JUDGED_AFTER",
    "STAY_MARGIN", "TRIAL_TOKENS", "AdaptivePolicy", "ByMatchLength", "ByPosition", "Choice",
    "CostCurve", "Estimate", "FixedPolicy", "Learned", "Lesson", "LessonStore", "Memory", "Option",
    "Policy", "ProbeBudget", "Shadow", "Switches", "best_choice", "draft_rates", "draft_s",
    "expected_tokens", "followed", "lesson_of", "priors", "rate_bound", "taught",
]  # fmt: skip
