"""ray_session's helpers that need no Ray: the driver's frozen heap."""
import gc

from hyperscalees.distributed.ray_session import heap_frozen


def test_the_heap_is_frozen_inside_and_thawed_after_and_someone_elses_freeze_is_left_alone():
    assert gc.get_freeze_count() == 0
    with heap_frozen():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    with heap_frozen(enabled=False):
        assert gc.get_freeze_count() == 0
    gc.freeze()                                          # the caller's own freeze
    try:
        mine = gc.get_freeze_count()
        with heap_frozen():
            assert gc.get_freeze_count() == mine
        assert gc.get_freeze_count() == mine             # not thawed by us
    finally:
        gc.unfreeze()
