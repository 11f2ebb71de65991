"""The RASP programs toylens compiles with Tracr: the Tracr library's own (tracr.compiler.lib) and
InterpBench's case list (Gupta et al. 2024, circuits-benchmark's `cases/case_N.py`), re-written here
small: a vocabulary of at most 5 values and at most 6 positions, so the stored fixtures stay a few
kB and the exhaustive inert-edge check (every input of the domain, every length) stays fast.

A program's `build(rasp, lib)` gets the two Tracr modules (so nothing here imports jax) and returns
its output SOp, named after the program: the fixture's output variable is that name. Every length
here is the full compiled length (tracr.pairs), so a program whose output depends on the length
alone (make_length) would score no position and is left out; the length still enters programs that
read it (reverse, the mirror and the last element), and the inert check tries every length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from probes.ablation import Ablation

LETTERS = ("a", "b", "c")
DIGITS = (0, 1, 2)
SMALL = (1, 2, 3)


@dataclass(frozen=True)
class Program:
    name: str
    source: str  # where the program comes from: a function of tracr.compiler.lib, or an InterpBench case
    vocab: tuple
    max_seq_len: int
    build: Callable[[Any, Any], Any]  # (tracr.rasp.rasp, tracr.compiler.lib) -> the output SOp
    paper: dict | None = None  # Ablation -> ACDC's AUC (Conmy et al. 2023, Tracr table), where it reports one
    distinct: bool = False  # inputs are permutations of the vocabulary (sort_unique's premise)
    acdc_length: int | None = None  # ACDC's inputs: permutations of the vocabulary at this length


def previous(rasp, sop, offset: int = 1):
    """`sop` read `offset` positions back (forward when negative); None where that is off the end."""
    return rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, lambda k, q: q == k + offset), sop, default=None)


def length_of(rasp):
    """The number of tokens at every position, by a selector width over an all-true selector."""
    return rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE))


def at_index(rasp, where, sop):
    """`sop` read at the position `where` names (a categorical index per query)."""
    return rasp.Aggregate(rasp.Select(rasp.indices, where, rasp.Comparison.EQ), sop, default=None)


def differs(x, y) -> bool:
    return x is not None and y is not None and x != y


def pair_balance(rasp, lib):
    return lib.make_pair_balance(rasp.tokens, "(", ")").named("pair_balance")


def oscillation(rasp, lib):
    """InterpBench case 6: a token is a turning point (up then down, or down then up)."""
    up_in = rasp.SequenceMap(lambda a, b: a is not None and b > a, previous(rasp, rasp.tokens), rasp.tokens)
    up_out = rasp.SequenceMap(lambda a, b: b is not None and b > a, rasp.tokens, previous(rasp, rasp.tokens, -1))
    return rasp.SequenceMap(lambda a, b: a != b, up_in, up_out).named("oscillation")


def trend(rasp, lib):
    """InterpBench case 13: each token against the next one."""

    def compare(a, b):
        return "end" if b is None else "up" if a < b else "down" if a > b else "flat"

    return rasp.SequenceMap(compare, rasp.tokens, previous(rasp, rasp.tokens, -1)).named("trend")


def frequency_class(rasp, lib):
    """InterpBench case 18: a token's count against the length (over half, over a quarter, else)."""

    def label(count, n):
        return "frequent" if count > n / 2 else "common" if count > n / 4 else "rare"

    return rasp.SequenceMap(label, lib.make_hist(), length_of(rasp)).named("frequency_class")


def duplicate_removal(rasp, lib):
    """InterpBench case 19: a token repeating the previous one becomes '-'."""
    return rasp.SequenceMap(lambda x, p: "-" if x == p else x, rasp.tokens, previous(rasp, rasp.tokens)).named(
        "duplicate_removal"
    )


def boundary(rasp, lib):
    """InterpBench case 32: the token differs from the previous one."""
    return rasp.SequenceMap(differs, rasp.tokens, previous(rasp, rasp.tokens)).named("boundary")


def alternation(rasp, lib):
    """InterpBench case 38: the token differs from both neighbours (two reads, one AND)."""
    before = rasp.SequenceMap(differs, previous(rasp, rasp.tokens), rasp.tokens)
    after = rasp.SequenceMap(differs, rasp.tokens, previous(rasp, rasp.tokens, -1))
    return rasp.SequenceMap(lambda a, b: a and b, before, after).named("alternation")


def first_element(rasp, lib):
    """InterpBench case 42: every position holds the first token."""
    return at_index(rasp, rasp.Map(lambda i: 0, rasp.indices), rasp.tokens).named("first_element")


def second_element(rasp, lib):
    """InterpBench case 57: every position holds the second token."""
    return at_index(rasp, rasp.Map(lambda i: 1, rasp.indices), rasp.tokens).named("second_element")


def count_greater(rasp, lib):
    """InterpBench case 44: how many tokens are greater than this one."""
    return rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.GT)).named("count_greater")


def count_less(rasp, lib):
    """InterpBench case 63: how many tokens are less than this one."""
    return rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.LT)).named("count_less")


def rank(rasp, lib):
    """InterpBench case 61: one plus the count of smaller tokens (a selector width, then an MLP)."""
    smaller = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.LT))
    return rasp.Map(lambda n: n + 1, smaller).named("rank")


def double_first_half(rasp, lib):
    """InterpBench case 45: tokens in the first half of the sequence doubled."""
    first_half = rasp.SequenceMap(lambda i, n: i < n / 2, rasp.indices, length_of(rasp))
    return rasp.SequenceMap(lambda x, first: 2 * x if first else x, rasp.tokens, first_half).named("double_first_half")


def add_index(rasp, lib):
    """InterpBench case 48: token plus its index (one MLP over token and position)."""
    return rasp.SequenceMap(lambda x, i: x + i, rasp.tokens, rasp.indices).named("add_index")


def odd_increment(rasp, lib):
    """InterpBench case 53: tokens at odd indices incremented (an index MLP, then a token x parity MLP)."""
    odd = rasp.Map(lambda i: i % 2, rasp.indices)
    return rasp.SequenceMap(lambda x, o: x + o, rasp.tokens, odd).named("odd_increment")


def zero_every_third(rasp, lib):
    """InterpBench case 56: every third token set to 0."""
    third = rasp.Map(lambda i: (i + 1) % 3 == 0, rasp.indices)
    return rasp.SequenceMap(lambda x, t: 0 if t else x, rasp.tokens, third).named("zero_every_third")


def mirror_first_half(rasp, lib):
    """InterpBench case 58: the second half holds the first half mirrored (reads the length)."""
    source = rasp.SequenceMap(lambda i, n: n - 1 - i if i >= n // 2 else i, rasp.indices, length_of(rasp))
    return at_index(rasp, source, rasp.tokens).named("mirror_first_half")


def times_length(rasp, lib):
    """InterpBench case 67: each token times the length."""
    return rasp.SequenceMap(lambda x, n: x * n, rasp.tokens, length_of(rasp)).named("times_length")


def increasing(rasp, lib):
    """InterpBench case 89: the whole sequence never decreases (a count of the positions that do)."""
    steps = rasp.SequenceMap(lambda p, x: 0 if p is not None and p > x else 1, previous(rasp, rasp.tokens), rasp.tokens)
    drops = rasp.SelectorWidth(rasp.Select(steps, steps, lambda k, q: k == 0))
    return rasp.Map(lambda n: n == 0, drops).named("increasing")


def zero_if_drop(rasp, lib):
    """InterpBench case 92: a token less than the previous one set to 0."""
    return rasp.SequenceMap(
        lambda x, p: 0 if p is not None and x < p else x, rasp.tokens, previous(rasp, rasp.tokens)
    ).named("zero_if_drop")


def sum_with_next(rasp, lib):
    """InterpBench case 99: each token plus the next one (the last one alone)."""
    return rasp.SequenceMap(lambda x, n: x if n is None else x + n, rasp.tokens, previous(rasp, rasp.tokens, -1)).named(
        "sum_with_next"
    )


def swap_first_two(rasp, lib):
    """InterpBench case 100: the first two tokens swapped."""
    source = rasp.Map(lambda i: 1 if i == 0 else 0 if i == 1 else i, rasp.indices)
    return at_index(rasp, source, rasp.tokens).named("swap_first_two")


def last_two_equal(rasp, lib):
    """InterpBench case 109: the last two tokens are equal, at every position (reads the length)."""
    n = length_of(rasp)
    last = at_index(rasp, rasp.Map(lambda m: m - 1, n), rasp.tokens)
    before = at_index(rasp, rasp.Map(lambda m: m - 2, n), rasp.tokens)
    return rasp.SequenceMap(lambda a, b: a is not None and a == b, last, before).named("last_two_equal")


def last_element(rasp, lib):
    """InterpBench case 111: the last token at position 0, zeros after it."""
    last = at_index(rasp, rasp.Map(lambda m: m - 1, length_of(rasp)), rasp.tokens)
    return rasp.SequenceMap(lambda x, i: x if i == 0 else 0, last, rasp.indices).named("last_element")


def difference_to_next(rasp, lib):
    """InterpBench case 112: the next token minus this one (0 at the end)."""
    return rasp.SequenceMap(lambda x, n: 0 if n is None else n - x, rasp.tokens, previous(rasp, rasp.tokens, -1)).named(
        "difference_to_next"
    )


def pairwise_sum(rasp, lib):
    """InterpBench case 118: each token plus the previous one (the first alone)."""
    return rasp.SequenceMap(lambda x, p: x if p is None else x + p, rasp.tokens, previous(rasp, rasp.tokens)).named(
        "pairwise_sum"
    )


def pairwise_max(rasp, lib):
    """InterpBench case 131: the larger of each token and the previous one."""
    return rasp.SequenceMap(lambda x, p: x if p is None else max(x, p), rasp.tokens, previous(rasp, rasp.tokens)).named(
        "pairwise_max"
    )


def all_equal(rasp, lib):
    """InterpBench case 124: every token equals the first (a count of those that differ)."""
    same = rasp.SequenceMap(lambda x, f: x == f, rasp.tokens, first_element(rasp, lib))
    others = rasp.SelectorWidth(rasp.Select(same, same, lambda k, q: not k))
    return rasp.Map(lambda n: n == 0, others).named("all_equal")


def swap_first_last(rasp, lib):
    """InterpBench case 128: the first and last tokens swapped (reads the length)."""
    source = rasp.SequenceMap(lambda i, n: n - 1 if i == 0 else 0 if i == n - 1 else i, rasp.indices, length_of(rasp))
    return at_index(rasp, source, rasp.tokens).named("swap_first_last")


def index_sum(rasp, lib):
    """InterpBench case 15: token + token - index, through make_nary_sequencemap's tuple MLPs."""
    return lib.make_nary_sequencemap(lambda x, y, i: x + y - i, rasp.tokens, rasp.tokens, rasp.indices).named(
        "index_sum"
    )


def lib_program(maker: str, *args, **kwargs) -> Callable[[Any, Any], Any]:
    """A program of tracr.compiler.lib called on `args`, where "tokens" stands for rasp.tokens."""

    def build(rasp, lib):
        given = [rasp.tokens if a == "tokens" else a for a in args]
        return getattr(lib, maker)(*given, **kwargs)

    return build


def interpbench(case: int, build: Callable[[Any, Any], Any], vocab: tuple, max_seq_len: int = 5, **kw) -> Program:
    return Program(build.__name__, f"InterpBench case {case}", vocab, max_seq_len, build, **kw)


PROGRAMS = {
    p.name: p
    for p in (
        Program(
            "reverse",
            "tracr lib.make_reverse",
            LETTERS,
            5,
            lib_program("make_reverse", "tokens"),
            {Ablation.COUNTERFACTUAL: 0.200, Ablation.ZERO: 1.000},
            acdc_length=3,
        ),
        Program(
            "frac_prevs",
            "tracr lib.make_frac_prevs",
            ("x", "y"),
            5,
            lambda rasp, lib: lib.make_frac_prevs(rasp.tokens == "x"),
            {Ablation.COUNTERFACTUAL: 0.600, Ablation.ZERO: 1.000},
        ),
        Program(
            "sort",
            "tracr lib.make_sort_unique",
            (1, 2, 3, 4, 5, 6),
            4,
            lib_program("make_sort_unique", "tokens", "tokens"),
            distinct=True,
        ),
        Program("hist", "tracr lib.make_hist", LETTERS, 5, lib_program("make_hist")),
        Program(
            "sort_repeats",
            "tracr lib.make_sort",
            SMALL,
            4,
            lib_program("make_sort", "tokens", "tokens", max_seq_len=4, min_key=1),
        ),
        Program("sort_freq", "tracr lib.make_sort_freq", LETTERS, 4, lib_program("make_sort_freq", 4)),
        Program(
            "count_less_freq", "tracr lib.make_count_less_freq", LETTERS, 5, lib_program("make_count_less_freq", 1)
        ),
        Program(
            "count_a", "tracr lib.make_count; InterpBench case 14", LETTERS, 5, lib_program("make_count", "tokens", "a")
        ),
        Program("previous_token", "tracr lib.shift_by", LETTERS, 5, lib_program("shift_by", 1, "tokens")),
        Program(
            "pattern_abc",
            "tracr lib.detect_pattern; InterpBench case 12",
            LETTERS,
            5,
            lib_program("detect_pattern", "tokens", "abc"),
        ),
        Program("pair_balance", "tracr lib.make_pair_balance; InterpBench case 4", ("(", ")", "a"), 5, pair_balance),
        Program(
            "dyck1",
            "tracr lib.make_shuffle_dyck (one pair)",
            ("(", ")", "a"),
            4,
            lib_program("make_shuffle_dyck", ["()"]),
        ),
        interpbench(6, oscillation, SMALL),
        interpbench(13, trend, SMALL),
        interpbench(15, index_sum, DIGITS, 4),
        interpbench(18, frequency_class, LETTERS),
        interpbench(19, duplicate_removal, LETTERS),
        interpbench(32, boundary, LETTERS),
        interpbench(38, alternation, LETTERS),
        interpbench(42, first_element, LETTERS),
        interpbench(44, count_greater, SMALL),
        interpbench(45, double_first_half, SMALL, 4),
        interpbench(48, add_index, DIGITS),
        interpbench(53, odd_increment, DIGITS),
        interpbench(56, zero_every_third, SMALL),
        interpbench(57, second_element, LETTERS),
        interpbench(58, mirror_first_half, LETTERS),
        interpbench(61, rank, SMALL),
        interpbench(63, count_less, SMALL),
        interpbench(67, times_length, SMALL),
        interpbench(89, increasing, SMALL),
        interpbench(92, zero_if_drop, SMALL),
        interpbench(99, sum_with_next, SMALL),
        interpbench(100, swap_first_two, LETTERS),
        interpbench(109, last_two_equal, LETTERS),
        interpbench(111, last_element, SMALL),
        interpbench(112, difference_to_next, SMALL),
        interpbench(118, pairwise_sum, SMALL),
        interpbench(124, all_equal, LETTERS),
        interpbench(128, swap_first_last, LETTERS),
        interpbench(131, pairwise_max, SMALL),
    )
}
