"""`utils/gc_pause.py`: the collector is off inside the block and as it was after, errors included."""

import gc

import pytest

from cir_demo.utils.gc_pause import collector_paused


def test_collector_off_inside_and_restored_after_even_on_error():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_collector_off_before_stays_off():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
