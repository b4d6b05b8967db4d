"""TrackedTokenList: content behaves as a list, and a watcher's mark is sound.

Sound: every index below the mark and below the length the watcher synced still holds what it
held then. The fast penalties path rewrites only from there on, so an unsound mark is a wrong
tensor.
"""

from hypothesis import given
from hypothesis import strategies as st

from vllm_hotpaths.tracked_list import UNCHANGED, TrackedTokenList

values = st.integers(-1, 9)
index = st.integers(-6, 6)
slices = st.builds(slice, st.none() | index, st.none() | index, st.none() | st.sampled_from([1, 2, -1]))
mutations = st.one_of(
    st.tuples(st.just("append"), values),
    st.tuples(st.just("extend"), st.lists(values, max_size=3)),
    st.tuples(st.just("iadd"), st.lists(values, max_size=3)),
    st.tuples(st.just("imul"), st.integers(0, 2)),
    st.tuples(st.just("insert"), index, values),
    st.tuples(st.just("pop"), index),
    st.tuples(st.just("remove"), values),
    st.tuples(st.just("setitem"), index, values),
    st.tuples(st.just("setslice"), slices, st.lists(values, max_size=3)),
    st.tuples(st.just("delitem"), index | slices),
    st.tuples(st.just("clear")),
    st.tuples(st.just("sort")),
    st.tuples(st.just("reverse")),
    st.tuples(st.just("sync")),
)


def apply(lst, op):
    name, *args = op
    if name == "iadd":
        lst += args[0]
    elif name == "imul":
        lst *= args[0]
    elif name == "setitem":
        lst[args[0]] = args[1]
    elif name == "setslice":
        lst[args[0]] = args[1]
    elif name == "delitem":
        del lst[args[0]]
    else:
        getattr(lst, name)(*args)
    return lst


@given(st.lists(values, min_size=1, max_size=8), st.lists(mutations, min_size=1, max_size=12))
def test_marks_are_sound(initial, ops):
    tracked, plain = TrackedTokenList(initial), list(initial)
    tracked.watch(1)
    synced = list(initial)
    for op in ops:
        if op[0] == "sync":
            tracked.watch(1)
            synced = list(plain)
            continue
        outcomes = []
        for target in (tracked, plain):
            try:
                apply(target, op)
                outcomes.append(None)
            except (IndexError, ValueError) as err:
                outcomes.append(type(err))
        assert outcomes[0] == outcomes[1]
        assert list(tracked) == plain
        stable = min(tracked.dirty_from(1), len(synced))
        assert stable >= 0
        assert plain[:stable] == synced[:stable]


def test_unwatched_lists_have_no_mark():
    lst = TrackedTokenList([1, 2])
    assert lst.dirty_from(3) is None
    lst.watch(3)
    lst.append(4)
    assert lst.dirty_from(3) == UNCHANGED  # growth at the end changes nothing synced
    lst[1] = 5
    assert lst.dirty_from(3) == 1
    lst.unwatch(3)
    assert lst.dirty_from(3) is None
