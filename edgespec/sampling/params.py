"""A request's sampling parameters and the checks every entry point (CLI, Python API, server)
shares."""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, replace

import numpy as np

from edgespec.errors import SamplingParamsError


@dataclass(frozen=True)
class Cut:
    """A rule that cuts the tail of a row's distribution, as every entry point reads its
    parameter: the field (the server's key; the CLI's flag is --field-with-dashes), the
    values it takes, the value that turns it off. host_only: only token_dist implements it,
    so the batched and device paths hand a request that sets it to token_dist row by row."""

    name: str
    low: float
    high: float
    off: float
    help: str
    open_low: bool = False
    open_high: bool = False
    host_only: bool = False

    def check(self, value: float) -> None:
        fix = f"use {self.off} to turn it off"
        check_range(self.name, value, self.low, self.high, fix, self.open_low, self.open_high)


# temperature (the scale) and top-k (a count) are fields of their own; token_dist applies the
# cuts after them (dist.cut_tail)
CUTS = (
    Cut("top_p", 0.0, 1.0, 1.0, "nucleus sampling: the likeliest tokens up to this mass", True),
    Cut("min_p", 0.0, 1.0, 0.0, "cut tokens under this times the likeliest's p", open_high=True),
    Cut("typical_p", 0.0, 1.0, 1.0, "locally typical sampling", True, host_only=True),
)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy argmax
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    min_p: float = 0.0  # 0 = off
    seed: int | None = None
    # how a drafted token is judged (docs/exactness.md): "gumbel" keys the randomness to the
    # token's position, so the output equals plain decoding's with the same seed; "rejection"
    # is Leviathan et al.'s rejection sampling
    sampler: str = "gumbel"
    typical_p: float = 1.0  # locally typical sampling (dist.cut_typical); 1 = off

    def __post_init__(self) -> None:
        check_range("temperature", self.temperature, 0.0, math.inf, "use 0 for greedy decoding")
        check_float32_temperature(self.temperature)
        if self.sampler not in SAMPLERS:
            raise SamplingParamsError(
                f"unknown sampler {self.sampler!r}; choose one of {', '.join(SAMPLERS)}"
            )
        for cut in CUTS:
            cut.check(getattr(self, cut.name))
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise SamplingParamsError(
                f"top_k must be a whole number >= 0, got {self.top_k!r}; use 0 to turn it off"
            )
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise SamplingParamsError(f"seed must be a whole number >= 0, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def cuts_tail(self) -> bool:
        """Whether a cut (top-p, min-p, ...) is on: more than temperature and top-k."""
        return any(getattr(self, cut.name) != cut.off for cut in CUTS)

    @property
    def host_only(self) -> bool:
        """Whether a cut only token_dist implements is on (Cut.host_only)."""
        return any(getattr(self, cut.name) != cut.off for cut in CUTS if cut.host_only)


SAMPLERS = ("gumbel", "rejection")

FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # smallest normal float32, about 1.18e-38


def check_float32_temperature(temperature: float) -> None:
    """Logits are divided by float32(temperature): it must be a normal float32 (0 is greedy)."""
    if temperature == 0.0 or not math.isfinite(temperature):
        return
    t32 = float(np.float32(temperature))
    if not FLOAT32_TINY <= t32 < math.inf:
        raise SamplingParamsError(
            f"temperature {temperature!r} is {'0' if t32 < FLOAT32_TINY else 'infinite'} "
            f"in float32, which the logits are divided by; use 0 for greedy decoding or a "
            f"temperature between {FLOAT32_TINY:.3g} and {float(np.finfo(np.float32).max):.3g}"
        )


def check_scaled(z_max: float, sp: SamplingParams) -> None:
    """logits / temperature must stay finite: a tiny temperature turns them into inf and the
    probabilities into NaN (which always drew the last token); NaN logits are refused as
    such (nan_logits)."""
    if math.isnan(z_max):
        raise nan_logits()
    if not math.isfinite(z_max):
        raise SamplingParamsError(
            f"temperature {sp.temperature!r} overflows float32 on these logits (logit / "
            f"temperature = {z_max}); use 0 for greedy decoding or a larger temperature"
        )


def nan_logits() -> SamplingParamsError:
    return SamplingParamsError(
        "the model's logits hold NaN, so no token can be drawn; the model file or its "
        "back-end is broken: check it with `edgespec doctor`"
    )


def span_text(low: float, high: float, *, open_low: bool = False, open_high: bool = False) -> str:
    """An interval as a message writes it: [0, 2], (0, 1]."""
    return f"{'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"


def in_range(
    value: object, low: float, high: float, *, open_low: bool = False, open_high: bool = False
) -> bool:
    """A finite number (bool excluded) inside the interval; the one rule the CLI, the Python
    API and the server check sampling values by."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    above = value > low if open_low else value >= low
    below = value < high if open_high else value <= high
    return above and below


def check_range(
    name: str,
    value: float,
    low: float,
    high: float,
    fix: str,
    open_low: bool = False,
    open_high: bool = False,
) -> None:
    if not in_range(value, low, high, open_low=open_low, open_high=open_high):
        span = span_text(low, high, open_low=open_low, open_high=open_high)
        raise SamplingParamsError(f"{name} must be in {span}, got {value!r}; {fix}")


def request_params(sp: SamplingParams) -> SamplingParams:
    """A request's sampling parameters as the loop uses them: a seed always (a fresh random
    one when none is given: the randomness is keyed to it)."""
    if sp.greedy or sp.seed is not None:
        return sp
    return replace(sp, seed=secrets.randbits(63))
