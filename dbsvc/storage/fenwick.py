"""Prefix sums over counts that change one at a time: a Fenwick (binary indexed) tree.

An ordered index (indexes.py) counts the entries between two positions, a range's `total`
(`OrderedIndex.count_span`), as the lengths of the sublists between them: O(n / LOAD),
about 2,000 sublists at 1,000,000 records, the largest share of a range list's cost there
(bench/README.md, "Operators and cursor pages"). `Fenwick` holds the sublists' lengths so
that the sum of the first i of them costs O(log m) (m sublists), and one length changing
by one costs O(log m) too.

Layout: `tree[k]` (1-based; slot 0 unused) holds the sum of counts (k - lowbit(k), k],
lowbit(k) = k & -k, so a prefix sum adds O(log m) slots walking k &= k - 1, and a change to
count i touches the slots k = i + 1, k += lowbit(k). Built from the counts in O(m). The sum
of counts [i, j) walks whichever end is higher down until the two meet: the two prefix
walks share every slot below that point, which is never read.

Who owns one: the ordered index builds it on the first count asked of it and keeps it up
to date on every entry added to or removed from a sublist, and drops it whenever the
sublists themselves change (a split, a sublist emptied and removed, a bulk fill), since
their positions move; the next count builds it again. Splits come every LOAD inserts or
so, so a table taking writes between range lists pays O(m / LOAD) amortized per write for
the rebuilds and O(log m) per write for the updates. Imports nothing.
"""

from __future__ import annotations

from collections.abc import Iterable


class Fenwick:
    """Prefix sums of m counts (module docstring)."""

    __slots__ = ("tree",)

    def __init__(self, counts: Iterable[int]) -> None:
        tree = [0]
        tree.extend(counts)
        n = len(tree)
        for k in range(1, n):
            parent = k + (k & -k)
            if parent < n:
                tree[parent] += tree[k]
        self.tree = tree

    def __len__(self) -> int:
        return len(self.tree) - 1

    def add(self, i: int, delta: int) -> None:
        """Count `i` (0-based) changes by `delta`."""
        tree = self.tree
        n = len(tree)
        k = i + 1
        while k < n:
            tree[k] += delta
            k += k & -k

    def prefix(self, i: int) -> int:
        """The sum of counts [0, i)."""
        tree = self.tree
        total = 0
        while i > 0:
            total += tree[i]
            i &= i - 1
        return total

    def between(self, i: int, j: int) -> int:
        """The sum of counts [i, j), i <= j: both prefix walks at once, the higher end first,
        stopping where they meet, so two near ends (a range over a few sublists) cost a few
        steps, not 2 log m."""
        tree = self.tree
        total = 0
        while i != j:
            if j > i:
                total += tree[j]
                j &= j - 1
            else:
                total -= tree[i]
                i &= i - 1
        return total

    def find(self, position: int) -> tuple[int, int]:
        """(i, position - the sum of counts [0, i)) for the count i holding `position`
        (0-based, under the total): a descent from the highest power of two, O(log m)."""
        tree = self.tree
        n = len(tree) - 1
        k = 0
        step = 1 << n.bit_length()
        while step:
            nxt = k + step
            if nxt <= n and tree[nxt] <= position:
                k = nxt
                position -= tree[nxt]
            step >>= 1
        return k, position
