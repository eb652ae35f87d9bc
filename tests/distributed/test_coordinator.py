"""The coordinator's chunk bookkeeping, driven by a fake clock: pull order, straggler copies,
first result wins, duplicates counted, failures re-queued."""
import pytest

from hyperscalees.distributed.coordinator import Chunk, ChunkQueue, ChunkTimes, Counters, split


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_split_covers_the_population_in_order():
    cs = split(10, 4)
    assert [(c.lo, c.hi) for c in cs] == [(0, 4), (4, 8), (8, 10)] and cs[2].count == 2
    with pytest.raises(ValueError, match="must be >= 1"):
        split(0, 4)


def test_workers_pull_pending_chunks_in_member_order_then_wait():
    q = ChunkQueue(0, split(8, 2), clock=Clock())
    got = [q.assign(w).index for w in "abcd"]
    assert got == [0, 1, 2, 3] and q.assign("e") is None  # nothing pending, nobody late yet
    for i, w in zip(got, "abcd"):
        assert q.complete(i, w, i * 10)
    assert q.done and q.results() == [0, 10, 20, 30]


def test_a_straggler_is_copied_after_the_timeout_and_the_first_result_wins():
    clock = Clock()
    q = ChunkQueue(0, split(4, 2), ChunkTimes(factor=2.0), clock=clock)
    a, b = q.assign("slow"), q.assign("fast")
    clock.t = 1.0
    assert q.complete(b.index, "fast", "B")          # median chunk time 1 s -> timeout 2 s
    assert q.times.timeout == 2.0
    clock.t = 1.9
    assert q.assign("fast") is None                  # the slow chunk is not late yet
    clock.t = 2.1
    again = q.assign("fast")
    assert again == a and q.counters.reissued == 1
    assert q.assign("fast") is None                  # never twice to the same worker
    clock.t = 2.5
    assert q.complete(a.index, "fast", "A-fast") and q.done
    assert not q.complete(a.index, "slow", "A-slow")  # late duplicate: dropped and counted
    assert q.results() == ["A-fast", "B"] and q.counters.duplicates == 1


def test_until_late_is_how_long_an_idle_worker_may_sleep_before_a_straggler_copy():
    clock = Clock()
    q = ChunkQueue(0, split(4, 2), ChunkTimes(straggler_timeout=3.0), clock=clock)
    assert q.until_late() is None                    # nothing running
    a = q.assign("a")
    clock.t = 1.0
    b = q.assign("b")
    assert q.until_late() == pytest.approx(2.0)      # the oldest chunk (started at 0) is late at 3
    clock.t = 2.5
    assert q.complete(a.index, "a", "A")
    assert q.until_late() == pytest.approx(1.5)      # now b's, started at 1
    clock.t = 5.0
    assert q.until_late() == 0.0 and q.assign("a") == b
    assert q.complete(b.index, "a", "B") and q.until_late() is None


def test_a_failed_chunk_goes_back_to_the_front_unless_a_copy_still_runs():
    clock = Clock()
    q = ChunkQueue(0, split(6, 2), ChunkTimes(straggler_timeout=1.0), clock=clock)
    first, second = q.assign("a"), q.assign("b")
    q.fail(first.index, "a")
    assert q.assign("c") == first and q.counters.requeued == 1   # re-run before chunk 2
    assert q.assign("e").index == 2
    clock.t = 5.0
    copy = q.assign("d")                                        # chunks 0-2 are late: oldest first
    assert copy.index == 0
    assert q.assign("d").index == 1
    q.fail(second.index, "b")                                   # "d" still runs it: not re-queued
    assert q.counters.requeued == 1
    assert sorted(q.forget("d")) == [0, 1] and q.counters.requeued == 2  # "c" still runs chunk 0
    assert q.assign("f") == second


def test_timeout_is_initial_then_derived_from_the_median_with_a_floor():
    t = ChunkTimes(factor=3.0, floor=0.5, initial=30.0)
    assert t.timeout == 30.0
    for s in (0.01, 0.02, 10.0):
        t.add(s)
    assert t.median == 0.02 and t.timeout == 0.5
    assert ChunkTimes(straggler_timeout=4.0).timeout == 4.0
    with pytest.raises(ValueError, match="straggler_timeout must be > 0"):
        ChunkTimes(straggler_timeout=0.0)
    with pytest.raises(ValueError, match="factor must be > 1"):
        ChunkTimes(factor=1.0)


def test_results_before_done_say_how_many_are_missing():
    q = ChunkQueue(4, split(4, 2), counters=Counters())
    with pytest.raises(RuntimeError, match="step 4: 2 chunks still missing"):
        q.results()


def test_a_chunk_that_keeps_failing_ends_the_step_with_its_reason():
    from hyperscalees.distributed.coordinator import ChunkFailedError
    q = ChunkQueue(7, split(4, 2), max_failures=3)
    for attempt in range(2):
        c = q.assign("a")
        assert c.index == 0
        q.fail(c.index, "a", "checksum mismatch")
    c = q.assign("a")
    with pytest.raises(ChunkFailedError, match=r"members \[0, 2\) of step 7 failed 3 times; last: checksum mismatch"):
        q.fail(c.index, "a", "checksum mismatch")


def test_a_queue_owns_only_its_own_chunks():
    """A group's coordinator runs one queue per chunk the driver hands it, several a step, with the same
    indices: a straggler's copy coming back from an earlier queue must not complete the current one's."""
    first = ChunkQueue(0, [Chunk(i, c.lo, c.hi) for i, c in enumerate(split(16, 4))])
    later = ChunkQueue(0, [Chunk(i, 16 + c.lo, 16 + c.hi) for i, c in enumerate(split(16, 4))])
    assert all(first.owns(c) for c in first.chunks) and all(later.owns(c) for c in later.chunks)
    assert not any(later.owns(c) for c in first.chunks)
    assert not later.owns(Chunk(7, 0, 4))
