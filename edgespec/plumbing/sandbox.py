"""A Jinja2 sandbox with budgets, for the chat templates model files carry.

Jinja2's immutable sandbox stops a template from touching Python, but not from spending
time and memory: `range(10**9)`, recursive macros, a string doubled in a loop or nested
loops over a long string would hang the process or take gigabytes. Here every way a
template can make a value pays into a budget checked *before* the value is made:

- size: no value (string, or list/dict counted through its items: n references to one
  string print as n copies) and no output grows past `max_chars`. Operators that multiply
  (`*`, `%`, `**`, `+`, `~`), calls and filters are checked before they run where their
  result can be far larger than their arguments (format widths, replace, join, indent,
  wordwrap, expandtabs), and every result after;
- steps: a trace function counts the lines the compiled template runs (every loop turn is
  one), which bounds loops of any shape, and checks a wall clock;
- depth: macro and recursive-loop calls nest at most `max_depth` deep.

A template that goes past a budget raises TemplateLimitError naming what and how much.
"""

from __future__ import annotations

import re
import string
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from types import FrameType, GeneratorType
from typing import Any

from jinja2.compiler import CodeGenerator, Frame
from jinja2.nodes import Concat
from jinja2.runtime import LoopContext, Macro, Namespace
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import concat as plain_concat

TEMPLATE_FILE = "<template>"  # the filename Jinja2 compiles template code under
PERCENT_DIRECTIVE = re.compile(r"%(?:\([^)]*\))?[#0 +\-]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?(.)", re.S)
DIGITS = re.compile(r"\d+")


class TemplateLimitError(Exception):
    """A template went past one of its budgets; the message says which."""


@dataclass(frozen=True)
class Budget:
    max_chars: int = 1 << 20  # characters in any one value and in the output
    max_steps: int = 1_000_000  # template lines run
    max_seconds: float = 10.0  # wall clock, a backstop for slow machines
    max_depth: int = 64  # nested macro / recursive loop calls
    max_range: int = 100_000  # items in one range()
    max_int_bits: int = 1024  # size of a number arithmetic may produce
    max_template_chars: int = 1 << 20


def size_of(value: Any, limit: int, known: dict[int, int] | None = None) -> int:
    """Characters value holds when printed, counting containers through their items (and
    each item as at least 1); stops counting once past limit. known: sizes of containers
    measured before (by id; the caller keeps them alive and unchanged)."""
    if isinstance(value, str):
        return len(value)
    total = 0
    stack = [value]
    while stack and total <= limit:
        v = stack.pop()
        if isinstance(v, (str, bytes)):
            total += len(v)
        elif known and id(v) in known:
            total += known[id(v)]
        elif isinstance(v, dict):
            total += len(v)
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple, set, frozenset)):
            total += len(v)
            stack.extend(v)
        elif isinstance(v, range):
            total += len(v) * 2
        elif isinstance(v, Namespace):
            stack.append(v._Namespace__attrs)  # type: ignore[attr-defined]
        else:
            total += 1
    return total


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every value, call and output checked against a Budget."""

    intercepted_binops = frozenset(["*", "%", "+", "**"])

    def __init__(self, budget: Budget, **options: Any) -> None:
        super().__init__(optimized=False, **options)  # no calls made while compiling
        self.budget = budget
        self.depth = 0
        self.known: dict[int, int] = {}  # id -> size of the caller's containers (messages)
        self.code_generator_class = BoundedCodeGenerator
        self.concat = self.checked_concat  # type: ignore[method-assign] # macro, block output
        self.finalize = self.checked_output
        self.globals["range"] = self.checked_range
        self.globals.pop("lipsum", None)  # paragraphs on demand: no chat template needs it
        self.filters = {name: self.checked_filter(name, f) for name, f in self.filters.items()}

    # --- sizes ----------------------------------------------------------------------------

    def check_size(self, n: int, what: str) -> None:
        if n > self.budget.max_chars:
            shown = f"{n:,}" if n < 10**15 else "about " + f"{n:.1e}"
            raise TemplateLimitError(
                f"{what} of {shown} characters, more than {self.budget.max_chars:,}"
            )

    def checked(self, value: Any, what: str = "a value") -> Any:
        self.check_size(self.size(value), what)
        return value

    def size(self, value: Any) -> int:
        return size_of(value, self.budget.max_chars, self.known)

    def remember(self, value: Any) -> None:
        """Measure a container of the caller's once: a template may pass `messages` to a
        filter on every loop turn. The sandbox keeps templates from changing it."""
        if isinstance(value, dict):
            children = list(value.values())
        elif isinstance(value, (list, tuple)):
            children = list(value)
        else:
            return
        for child in children:
            self.remember(child)
        self.known[id(value)] = size_of(value, 1 << 62, self.known)

    def checked_output(self, value: Any) -> Any:
        return self.checked(value, "an output value")

    def checked_concat(self, parts: Any) -> str:
        parts = list(parts)
        self.check_size(sum(map(self.size, parts)), "a block of text")
        return plain_concat(parts)

    def str_join(self, parts: tuple[Any, ...]) -> str:
        """The `~` operator."""
        self.check_size(sum(map(self.size, parts)), "a joined string")
        return plain_concat(map(str, parts))

    def checked_range(self, *args: int) -> range:
        r = range(*args)
        if len(r) > self.budget.max_range:
            raise TemplateLimitError(
                f"a range of {len(r):,} items, more than {self.budget.max_range:,}"
            )
        return r

    def check_int(self, n: int) -> None:
        if n.bit_length() > self.budget.max_int_bits:
            raise TemplateLimitError(f"a number of more than {self.budget.max_int_bits} bits")

    # --- operators ------------------------------------------------------------------------

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            self.check_multiply(left, right)
        elif operator == "**":
            self.check_power(left, right)
        elif operator == "%" and isinstance(left, str):
            self.check_percent_format(left, right)
        elif operator == "+" and not (isinstance(left, int) and isinstance(right, int)):
            self.check_size(self.size(left) + self.size(right), "a sum")
        result = self.binop_table[operator](left, right)
        if isinstance(result, int):
            self.check_int(result)
        return self.checked(result)

    def check_multiply(self, left: Any, right: Any) -> None:
        for seq, n in ((left, right), (right, left)):
            if isinstance(n, int) and isinstance(seq, (str, bytes, list, tuple)):
                self.check_size(self.size(seq) * max(n, 0), "a repeated sequence")
        if isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > self.budget.max_int_bits:
                raise TemplateLimitError(f"a number of more than {self.budget.max_int_bits} bits")

    def check_power(self, base: Any, exponent: Any) -> None:
        if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
            if abs(base) > 1 and (abs(base).bit_length() - 1) * exponent > self.budget.max_int_bits:
                raise TemplateLimitError(f"a number of more than {self.budget.max_int_bits} bits")

    def check_percent_format(self, fmt: str, args: Any) -> None:
        """`fmt % args` (and the format filter): widths and fields bound the result."""
        widths = []
        for width, precision, _ in PERCENT_DIRECTIVE.findall(fmt):
            if "*" in (width, precision):
                raise TemplateLimitError("a '*' width in a % format")
            widths += [int(width or 0), int(precision or 0)]
        n_fields = len(widths) // 2
        largest = max([self.size(a) for a in as_items(args)] or [0])
        self.check_size(len(fmt) + n_fields * (largest + max(widths or [0])), "a formatted string")

    def check_str_format(self, fmt: str, args: tuple, kwargs: dict) -> None:
        """str.format / format_map: each field is at most its widest argument plus its width."""
        n_fields, widest = 0, 0
        try:
            fields = list(string.Formatter().parse(fmt))
        except ValueError:
            return  # str.format will refuse it the same way
        for _, name, spec, _ in fields:
            if name is None:
                continue
            n_fields += 1
            if spec and "{" in spec:
                raise TemplateLimitError("a nested format field in str.format")
            widest = max([widest, *(int(d) for d in DIGITS.findall(spec or ""))])
        values = [*args, *kwargs.values()]
        largest = max([self.size(v) for v in values] or [0])
        self.check_size(len(fmt) + n_fields * (largest + widest), "a formatted string")

    # --- calls and filters ----------------------------------------------------------------

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        if isinstance(obj, (Macro, LoopContext)):
            return self.call_nested(context, obj, *args, **kwargs)
        method = getattr(obj, "__wrapped__", obj)  # str.format comes wrapped by the sandbox
        owner = getattr(method, "__self__", None)
        if isinstance(owner, str):
            args, kwargs = self.checked_arguments(args, kwargs, ints=True)
            self.check_str_method(owner, getattr(method, "__name__", ""), args, kwargs)
        else:
            args, kwargs = self.checked_arguments(args, kwargs, ints=False)
        return self.checked(super().call(context, obj, *args, **kwargs))

    def call_nested(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        """A macro or a recursive loop's next level, counted against max_depth."""
        if self.depth >= self.budget.max_depth:
            raise TemplateLimitError(
                f"macros or recursive loops nested more than {self.budget.max_depth} deep"
            )
        self.depth += 1
        try:
            return self.checked(super().call(context, obj, *args, **kwargs))
        finally:
            self.depth -= 1

    def checked_arguments(self, args: tuple, kwargs: dict, *, ints: bool) -> tuple[tuple, dict]:
        """Arguments with generators drawn into lists (so their size is known before a call
        joins them), each within the budget; with ints, numbers too (widths, counts)."""
        args = tuple(self.drawn(a) for a in args)
        kwargs = {k: self.drawn(v) for k, v in kwargs.items()}
        for value in (*args, *kwargs.values()):
            if isinstance(value, int) and not isinstance(value, bool):
                if ints and abs(value) > self.budget.max_chars:
                    raise TemplateLimitError(
                        f"an argument of {value:,}, more than {self.budget.max_chars:,}"
                    )
            else:
                self.checked(value, "an argument")
        return args, kwargs

    def drawn(self, value: Any) -> Any:
        if not isinstance(value, GeneratorType):
            return value
        items, total = [], 0
        for item in value:
            items.append(item)
            total += max(1, self.size(item))
            self.check_size(total, "a sequence")
        return items

    def check_str_method(self, s: str, name: str, args: tuple, kwargs: dict) -> None:
        """Methods whose result can be far larger than the string and its arguments."""
        if name in ("format", "format_map"):
            mapping = args[0] if name == "format_map" and args else {}
            self.check_str_format(s, args if name == "format" else (), {**kwargs, **mapping})
        elif name == "replace" and len(args) >= 2:
            self.check_replace(s, *args[:2])
        elif name == "join" and args:
            parts = args[0]
            self.check_size(self.size(parts) + len(s) * size_count(parts), "a joined string")
        elif name == "expandtabs":
            tab = int(args[0] if args else kwargs.get("tabsize", 8))
            self.check_size(len(s) + s.count("\t") * tab, "a string with tabs expanded")

    def check_replace(self, s: Any, old: Any, new: Any) -> None:
        if isinstance(s, str) and isinstance(old, str) and isinstance(new, str):
            n = s.count(old) if old else len(s) + 1
            self.check_size(len(s) + n * max(0, len(new) - len(old)), "a replaced string")

    def checked_filter(self, name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        passes_arg = getattr(f, "jinja_pass_arg", None) is not None

        @wraps(f)
        def checked(*args: Any, **kwargs: Any) -> Any:
            head, rest = (args[:1], args[1:]) if passes_arg else ((), args)
            rest, kwargs = self.checked_arguments(rest, kwargs, ints=True)
            self.check_filter(name, rest, kwargs)
            return self.checked(f(*head, *rest, **kwargs))

        return checked

    def check_filter(self, name: str, args: tuple, kwargs: dict) -> None:
        """Filters whose result can be far larger than their arguments."""
        if not args:
            return
        value, params = args[0], list(args[1:])

        def param(i: int, key: str, default: Any) -> Any:
            return params[i] if len(params) > i else kwargs.get(key, default)

        if name == "format" and isinstance(value, str):
            self.check_percent_format(value, kwargs or tuple(params))
        elif name == "replace" and len(params) >= 2:
            self.check_replace(value, params[0], params[1])
        elif name == "join":
            sep = str(param(0, "d", ""))
            self.check_size(self.size(value) + len(sep) * size_count(value), "a joined string")
        elif name == "indent" and isinstance(value, str):
            width = param(0, "width", 4)
            pad = len(width) if isinstance(width, str) else int(width)
            self.check_size(len(value) + (value.count("\n") + 1) * pad, "an indented string")
        elif name == "wordwrap" and isinstance(value, str):
            width = max(1, int(param(0, "width", 79)))
            wrap = param(2, "wrapstring", None) or "\n"
            lines = len(value) // width + 1
            self.check_size(len(value) + lines * len(wrap), "a wrapped string")
        elif name == "tojson":  # at most 6 characters per one (\\uXXXX), checked after
            indent = param(0, "indent", None)
            if isinstance(indent, int) and indent > 16:
                raise TemplateLimitError(f"a tojson indent of {indent}, more than 16")
        elif name == "slice" and params:  # a Python loop over the count
            slices = int(params[0])
            if slices > self.budget.max_range:
                raise TemplateLimitError(
                    f"a slice into {slices:,} parts, more than {self.budget.max_range:,}"
                )


def size_count(value: Any) -> int:
    """How many items a join over value puts separators between."""
    try:
        return len(value)
    except TypeError:
        return 0


def as_items(args: Any) -> list[Any]:
    if isinstance(args, tuple):
        return list(args)
    if isinstance(args, dict):
        return list(args.values())
    return [args]


class BoundedCodeGenerator(CodeGenerator):
    """Compiles `a ~ b` to the environment's checked join (Jinja2 has no hook for it)."""

    def visit_Concat(self, node: Concat, frame: Frame) -> None:
        self.write("environment.str_join((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def render_bounded(
    source: str, budget: Budget, context: dict[str, Any], functions: dict[str, Any]
) -> str:
    """Render an untrusted template within budget (TemplateLimitError past it), with context
    as its variables and functions as extra globals; other errors (a template that does not
    compile or fails) propagate as Jinja2 or Python raised them."""
    if len(source) > budget.max_template_chars:
        raise TemplateLimitError(
            f"a template of {len(source):,} characters, more than {budget.max_template_chars:,}"
        )
    env = BoundedSandbox(budget, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(functions)
    for value in context.values():
        env.remember(value)
    template = env.from_string(source)
    pieces: list[str] = []
    total = 0
    with step_budget(budget):
        for piece in template.generate(**context):
            total += len(piece)
            env.check_size(total, "an output")
            pieces.append(piece)
    return "".join(pieces)


class step_budget:  # noqa: N801 - a context manager, used like a function
    """Counts the lines template code runs in this thread (sys.settrace; the trace that was
    there before, a debugger's or coverage's, is put back after)."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.steps = 0
        self.deadline = 0.0
        self.previous: Any = None

    def __enter__(self) -> step_budget:
        self.deadline = time.monotonic() + self.budget.max_seconds
        self.previous = sys.gettrace()
        sys.settrace(self.on_call)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(self.previous)

    def on_call(self, frame: FrameType, event: str, arg: Any) -> Any:
        return self.on_line if frame.f_code.co_filename == TEMPLATE_FILE else None

    def on_line(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.steps += 1
            if self.steps > self.budget.max_steps:
                raise TemplateLimitError(f"more than {self.budget.max_steps:,} steps")
            if self.steps % 4096 == 0 and time.monotonic() > self.deadline:
                raise TemplateLimitError(f"more than {self.budget.max_seconds:g} s of rendering")
        return self.on_line
