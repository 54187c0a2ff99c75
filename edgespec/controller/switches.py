"""The target's width from pass to pass where its runtime keeps one CUDA graph: what a change
of width costs (switch_s) and when a width that repays its switches is worth changing to
(rent_or_buy)."""

from __future__ import annotations

from collections.abc import Sequence

from edgespec.controller.pricing import Choice, CostCurve

# Leaving plain on one graph costs its pass, the capture and two plain passes back (decisions.md)
LEAVE_PLAIN_SWITCHES = 4


class Switches:
    """The target's last passes (their width, how many in a row) and rent-or-buy's regret."""

    def __init__(self, curve: CostCurve, k_max: int) -> None:
        self.curve = curve
        self.k_max = k_max
        # the target's last pass: its width (1: plain) and how many passes of it in a row
        self.width, self.in_row = 1, 2
        self.left_plain = False  # the last pass was the first after a plain one
        # seconds lost so far to keeping a width another (regret_width) beats without its
        # switches (rent_or_buy)
        self.regret, self.regret_width = 0.0, 0

    def begin(self) -> None:
        """A request starts. Width 0: the prompt's pass, after which the next runs uncaptured
        whatever its width, and a one-token one captures after it; priced as plain
        (switch_s), so their switches are not learned as the curve's speed
        (docs/decisions.md)."""
        self.width, self.in_row = 0, 1
        self.regret, self.regret_width = 0.0, 0

    def passed(self, width: int) -> None:
        """The target ran a pass of `width` tokens."""
        self.left_plain = self.width <= 1 and width > 1
        self.width, self.in_row = width, self.in_row + 1 if width == self.width else 1

    def switch_s(self) -> list[float]:
        """What a target pass of 1..k_max + 1 tokens costs now beyond the curve, where the
        runtime keeps one CUDA graph (curve.switch_s; else []): a width other than the last
        pass's runs uncaptured, and the next like it captures. Leaving plain decoding is also
        charged the two plain passes that will come back to it, so plain is never charged:
        in a loop that drafts now and then, that return made every isolated verify step cost
        three switches, not one (bench/replay.py --one-graph). The pass that captures the new
        width is charged on leaving too (LEAVE_PLAIN_SWITCHES)."""
        s = self.curve.switch_s
        if not s:
            return []
        if self.width <= 1:  # plain, or the prompt's pass (begin)
            return [0.0] + [LEAVE_PLAIN_SWITCHES * s] * self.k_max
        prepaid = self.in_row == 1 and self.left_plain  # the capture, charged on leaving plain
        return [0.0] + [
            0.0 if prepaid and n == self.width else self.pass_switch_s(n)
            for n in range(2, self.k_max + 2)
        ]

    def rent_or_buy(
        self,
        myopic: Choice,
        steady: Choice,
        switch_s: Sequence[float],
        catch_up_s: float = 0.0,
        draft_s: float = 0.0,
    ) -> Choice:
        """The step to take where a change of width costs switches (switch_s): myopic, the
        best step with them charged, or steady, the best without, once staying has cost as
        much as changing would.

        Charging a step the whole switch it causes keeps a width that pays less, step after
        step, than one that would repay its switch in a few steps; charging a guessed share
        of it to each step drafted loses where drafting runs are short (docs/decisions.md,
        rent-or-buy). This is
        rent-or-buy: each step that keeps the myopic width adds what it loses against the
        steady one (its seconds times 1 - its rate / steady's rate), and the steady one is
        taken once that adds up to the extra switch it is charged now. At most twice the
        best in hindsight whatever comes; a steady choice that changes width starts over,
        so one step's passing chance (a one-off match) never adds up. draft_s: seconds of
        myopic's draft."""
        width = steady.k + 1
        # 0: myopic weighed it as charged; catch_up_s: what steady's drafter must forward first
        buy_s = switch_s[width - 1] - switch_s[myopic.k] + catch_up_s
        if buy_s <= 0.0 or steady.tokens_per_second <= myopic.tokens_per_second:
            self.regret, self.regret_width = 0.0, 0
            return myopic
        # leaving plain decoding costs the same switches at any width: one account for all
        account = width if self.width > 1 else 2
        if account != self.regret_width:
            self.regret, self.regret_width = 0.0, account
        if self.regret >= buy_s:
            self.regret, self.regret_width = 0.0, 0
            return Choice(steady.drafter, steady.k, myopic.tokens_per_second)
        step_s = self.curve.target(myopic.k + 1)
        if myopic.drafter is not None:
            step_s += draft_s
        self.regret += step_s * (1.0 - myopic.tokens_per_second / steady.tokens_per_second)
        return myopic

    def pass_switch_s(self, width: int) -> float:
        """What the runtime's one graph adds to a pass of `width` tokens after the last."""
        if width != self.width or self.in_row == 1:
            return self.curve.switch_s
        return 0.0
