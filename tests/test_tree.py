"""BarrierTree: shapes, what each node is programmed with, and trees that are not trees."""

import pytest
from hypothesis import given, strategies as st

from nicoll.errors import NicollError
from nicoll.hw.tree import BarrierTree


def test_binary_tree_of_seven():
    tree = BarrierTree.binary(7)
    assert tree.root == 0 and len(tree) == 7
    assert [tree.parent(r) for r in range(7)] == [None, 0, 0, 1, 1, 2, 2]
    assert tree.children(1) == [3, 4]
    assert tree.subtree(2) == [2, 5, 6]
    assert tree.route(0) == {1: 0, 3: 0, 4: 0, 2: 1, 5: 1, 6: 1}
    assert tree.route(3) == {}
    assert tree.depth() == 2 and tree.depth(6) == 2 and tree.max_children == 2


def test_chain_and_kary():
    chain = BarrierTree.chain(5)
    assert chain.depth() == 4 and chain.route(1) == {2: 0, 3: 0, 4: 0}
    tri = BarrierTree.kary(13, 3)
    assert tri.children(0) == [1, 2, 3] and tri.depth() == 2 and tri.max_children == 3
    assert BarrierTree.binary(1).route(0) == {}


@given(st.integers(1, 70), st.integers(1, 5))
def test_every_rank_is_routed_exactly_once_below_each_ancestor(n, k):
    tree = BarrierTree.kary(n, k)
    assert tree.subtree(tree.root) == list(range(n))
    for rank in range(n):
        route = tree.route(rank)
        assert sorted(route) == [r for r in tree.subtree(rank) if r != rank]
        for node, slot in route.items():
            assert node in tree.subtree(tree.children(rank)[slot])


def test_from_children():
    tree = BarrierTree.from_children({3: [0, 1], 0: [2]})
    assert tree.root == 3 and tree.parent(2) == 0 and tree.route(3) == {0: 0, 2: 0, 1: 1}


@pytest.mark.parametrize("make, message", [
    (lambda: BarrierTree([]), r"at least one node"),
    (lambda: BarrierTree([None, None]), r"exactly one root .* found 2: \[0, 1\]"),
    (lambda: BarrierTree([1, 0]), r"exactly one root .* found 0"),
    (lambda: BarrierTree([None, 2, 1]), r"ranks \[1, 2\] do not reach the root 0: .*cycle"),
    (lambda: BarrierTree([None, 5]), r"parent of rank 1 is 5, outside ranks 0..1"),
    (lambda: BarrierTree([None, 1]), r"rank 1 is its own parent"),
    (lambda: BarrierTree([None, "0"]), r"parent of rank 1 must be a rank or None, not '0'"),
    (lambda: BarrierTree.from_children({0: [1, 2], 1: [2]}),
     r"rank 2 is listed as a child of both 0 and 1"),
    (lambda: BarrierTree.from_children({0: [1]}, n=3), r"ranks \[2\] .* orphans"),
    (lambda: BarrierTree.kary(4, 0), r"k ≥ 1, not 0"),
    (lambda: BarrierTree.binary(0), r"positive number of nodes, not 0"),
])
def test_not_a_tree(make, message):
    with pytest.raises(NicollError, match=message):
        make()
