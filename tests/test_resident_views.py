"""Resident-buffer checks of the CUDA backend, exercised without a GPU through stand-in arrays that
expose `__cuda_array_interface__` the way numba, CuPy and PyTorch do."""
from __future__ import annotations

import types
import weakref

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import ir
from vyre_numba.gpu.resident import BufferViews

CTX = types.SimpleNamespace(handle=7, device=types.SimpleNamespace(id=0))


class _Owner:
    pass


class FakeNumbaArray:
    """Looks like a numba DeviceNDArray: CAI plus gpu_data with an owner finalizer and a context."""

    def __init__(self, n=16, typestr="<u4", strides=None, ptr=0x1000, ctx=CTX):
        self.__cuda_array_interface__ = {"typestr": typestr, "shape": (n,), "strides": strides,
                                         "data": (ptr, False), "version": 3}
        owner = _Owner()
        owner._finalizer = weakref.finalize(owner, lambda: None)
        self._owner = owner
        self.gpu_data = types.SimpleNamespace(owner=owner, context=ctx)

    def free(self):
        self._owner._finalizer()


def views():
    return BufferViews(types.SimpleNamespace(context=CTX, stream_handle=0, pointer_device=lambda ptr: 0))


DECL = ir.BufferDecl.read_write("x", 0, "u32")


def fix_in(e) -> str:
    assert "Fix:" in str(e.value), str(e.value)
    return str(e.value)


def test_a_good_array_is_checked_once_and_remembered():
    v, a = views(), FakeNumbaArray()
    assert v.get(a, DECL, np.dtype(np.uint32), "k")[:2] == (0x1000, 16)
    a.__cuda_array_interface__ = None  # a second look would fail: it must come from the cache
    assert v.get(a, DECL, np.dtype(np.uint32), "k")[:2] == (0x1000, 16)


def test_wrong_dtype():
    with pytest.raises(vn.DispatchError) as e:
        views().get(FakeNumbaArray(typestr="<f4"), DECL, np.dtype(np.uint32), "k")
    assert "u32" in fix_in(e)


def test_too_few_elements_for_a_static_count():
    decl = ir.BufferDecl.read("x", 0, "u32", 32)
    with pytest.raises(vn.DispatchError) as e:
        views().get(FakeNumbaArray(n=16), decl, np.dtype(np.uint32), "k")
    assert "32" in fix_in(e)


def test_non_contiguous_view():
    with pytest.raises(vn.DispatchError) as e:
        views().get(FakeNumbaArray(strides=(8,)), DECL, np.dtype(np.uint32), "k")
    assert "contiguous" in fix_in(e)


def test_other_context():
    other = types.SimpleNamespace(handle=99)
    with pytest.raises(vn.DispatchError) as e:
        views().get(FakeNumbaArray(ctx=other), DECL, np.dtype(np.uint32), "k")
    assert "context" in fix_in(e)


def test_freed_before_first_use_and_after_caching():
    v, a = views(), FakeNumbaArray()
    v.get(a, DECL, np.dtype(np.uint32), "k")
    a.free()
    with pytest.raises(vn.DispatchError) as e:
        v.get(a, DECL, np.dtype(np.uint32), "k")
    assert "freed" in fix_in(e)
    b = FakeNumbaArray()
    b.free()
    with pytest.raises(vn.DispatchError):
        views().get(b, DECL, np.dtype(np.uint32), "k")


def test_not_a_device_array():
    with pytest.raises(vn.DispatchError) as e:
        views().get([1, 2, 3], DECL, np.dtype(np.uint32), "k")
    assert "dispatch()" in fix_in(e)


def test_host_memory_through_dlpack_is_refused():
    with pytest.raises(vn.DispatchError) as e:
        views().get(np.zeros(4, np.uint32), DECL, np.dtype(np.uint32), "k")
    assert "host memory" in fix_in(e)


def test_cache_entry_dies_with_the_array():
    v, a = views(), FakeNumbaArray()
    v.get(a, DECL, np.dtype(np.uint32), "k")
    assert len(v._views) == 1
    del a
    assert len(v._views) == 0


class FakeForeignArray:
    """Looks like a CuPy/PyTorch array: CAI only, no numba gpu_data; its storage can move."""

    def __init__(self, n=16, ptr=0x2000, readonly=False):
        self.__cuda_array_interface__ = {"typestr": "<u4", "shape": (n,), "strides": None,
                                         "data": (ptr, readonly), "version": 3}


def test_foreign_arrays_are_looked_at_afresh_each_time():
    v, a = views(), FakeForeignArray()
    assert v.get(a, DECL, np.dtype(np.uint32), "k")[:2] == (0x2000, 16)
    a.__cuda_array_interface__ = {**a.__cuda_array_interface__, "data": (0x9000, False), "shape": (64,)}
    assert v.get(a, DECL, np.dtype(np.uint32), "k")[:2] == (0x9000, 64), "a resized tensor must not keep its old view"


def test_read_only_array_for_a_writable_buffer():
    with pytest.raises(vn.DispatchError) as e:
        views().get(FakeForeignArray(readonly=True), DECL, np.dtype(np.uint32), "k")
    assert "read-only" in fix_in(e)
    ro = ir.BufferDecl.read("x", 0, "u32")
    assert views().get(FakeForeignArray(readonly=True), ro, np.dtype(np.uint32), "k")[:2] == (0x2000, 16)


def test_lengths_past_u32_are_refused():
    with pytest.raises(vn.DispatchError) as e:
        views().get(FakeForeignArray(n=2**32), DECL, np.dtype(np.uint32), "k")
    assert "u32" in fix_in(e)


def test_memory_on_another_device_or_not_device_memory():
    for answer, fragment in ((1, "on device 1"), (None, "not device memory")):
        v = BufferViews(types.SimpleNamespace(context=CTX, stream_handle=0, pointer_device=lambda ptr, a=answer: a))
        with pytest.raises(vn.DispatchError) as e:
            v.get(FakeForeignArray(), DECL, np.dtype(np.uint32), "k")
        assert fragment in fix_in(e)
