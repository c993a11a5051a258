"""Ranges to read back that cannot be read are refused before any step of a sequence, repeated
sequence, megakernel or recorded sequence runs. Recorded sequences' step buffers and telemetry
refuse what they cannot take with a VyreError."""
from __future__ import annotations

import numpy as np
import pytest

import vyre_numba as vn
from vyre_numba import ir
from vyre_numba.backend import TELEMETRY_KEYS, Telemetry
from vyre_numba.display import Duration
from vyre_numba.errors import DispatchError, UnknownNameError, VyreError
from vyre_numba.recording import UnknownStepError

B = ir.BufferDecl
BACKENDS = ["reference", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return vn.get_backend(request.param)


def add(amount: int, name: str = "add", workgroup: int = 32) -> ir.Program:
    """x[i] += amount over u32."""
    i = ir.gid(0)
    return ir.Program([B.read_write("x", 0, "u32")], workgroup,
                      [ir.if_(i < ir.buf_len("x"), [ir.store("x", i, ir.load("x", i) + amount)])], name=name)


# ---- ranges to read back are checked before anything runs ---------------------------------------

class DLPackOnly:
    """Something with `__dlpack__` and nothing else to size it by."""

    def __dlpack__(self, stream=None):
        raise AssertionError("never read")

    def __dlpack_device__(self):
        return (1, 0)


def unreadable(backend, tmp_path, x) -> list:
    mapped = np.memmap(tmp_path / "m.bin", np.uint32, "w+", shape=(4,))
    return [[(mapped, 0, 4)], [(DLPackOnly(), 0, 1)], [(x, 3, 10)], [(x, -1, 1)], [([1, 2], 0, 1)],
            [(x, 0, 4), ("x", 0, 1)]]


@pytest.mark.parametrize("call", ["sequence", "fused", "repeated", "megakernel", "record_sequence"])
def test_a_read_that_cannot_be_read_is_refused_before_any_step_runs(backend, tmp_path, call):
    """Regression: a memmap or DLPack-only object in read= was refused by the download after
    every step had run (their writes stayed; the message did not say so)."""
    x = backend.upload(np.zeros(4, np.uint32))
    steps = [(add(1), [x]), (add(10), [x])]
    for read in unreadable(backend, tmp_path, x):
        with pytest.raises(DispatchError) as e:
            if call == "sequence":
                backend.dispatch_sequence(steps, read)
            elif call == "fused":
                backend.dispatch_sequence(steps, read, fuse=True)
            elif call == "repeated":
                backend.dispatch_repeated(steps[:1], steps[1:], 3, read)
            elif call == "megakernel":
                backend.megakernel(steps, read, max_rounds=2).run()
            else:
                backend.record_sequence(steps, read).replay()
        text = str(e.value)
        assert "nothing ran" in text and "Fix:" in text, text
        assert backend.download(x).tolist() == [0] * 4, (read, text)


def test_read_entries_are_named_by_their_place():
    be = vn.get_backend("reference")
    x = be.upload(np.zeros(4, np.uint32))
    with pytest.raises(DispatchError, match=r"^read entry 1, checked before anything runs \(nothing ran\): download: "
                                            r"a DLPackOnly is not a reference-backend buffer.*Fix:"):
        be.dispatch_sequence([(add(1), [x])], [(x,), (DLPackOnly(), 0, 1)])
    assert be.download(x).tolist() == [0] * 4


# ---- a recorded sequence's step buffers -----------------------------------------------------------

def test_step_buffers_past_the_end_or_closed_are_a_vyre_error_and_an_index_error(backend):
    """Regression: s.buffers[5] and, once closed, s.buffers[0] raised a raw IndexError."""
    x = backend.upload(np.zeros(4, np.uint32))
    s = backend.record_sequence([(add(1), [x]), (add(10), [x])])
    assert s.buffers[-1]["x"] is x and s.buffers[1]["x"] is x and len(s.buffers[:1]) == 1
    for k in (2, -3, np.int64(5), 2**100):
        with pytest.raises(UnknownStepError, match=r"no step .*it has 2 steps, numbered 0 to 1 .*Fix: index a step "
                                                   r"from 0 to 1\.") as e:
            s.buffers[k]
        assert isinstance(e.value, IndexError) and isinstance(e.value, VyreError)
    assert [f["x"] is x for f in s.buffers] == [True, True]
    s.close()
    with pytest.raises(IndexError, match=r"it holds none: it is closed.*Fix: record again"):
        s.buffers[0]


# ---- telemetry -----------------------------------------------------------------------------------

def test_telemetry_refuses_unhashable_names_and_non_int_counts_with_a_vyre_error():
    """Regression: `[] in t` and t.setdefault([]) raised a raw TypeError; a float stored in a counter
    made _repr_html_ raise a raw ValueError."""
    t = vn.get_backend("reference").telemetry()
    for call in (lambda: [] in t, lambda: t.setdefault([]), lambda: t.pop({}), lambda: t.pop([], 0),
                 lambda: t.get([]), lambda: t[[1]]):
        with pytest.raises(UnknownNameError, match="Fix:"):
            call()
    for call in (lambda: t.__setitem__("mine", 1.5), lambda: t.__setitem__("mine", True),
                 lambda: t.__setitem__(3, 1), lambda: t.setdefault("mine", "x"), lambda: t.update({"mine": None}),
                 lambda: t.update(mine=2.0), lambda: t.update(5), lambda: t.__ior__({"mine": [1]}),
                 lambda: Telemetry({"dispatches": 0.5})):
        with pytest.raises(DispatchError, match="Fix:"):
            call()
    assert "mine" not in t and t.setdefault("mine", np.int64(3)) == 3 and type(t["mine"]) is int
    t["late_ns"] = 1500
    t |= {"dispatches": np.uint8(2)}
    assert isinstance(t["late_ns"], Duration) and t["dispatches"] == 2 and t.pop("mine") == 3
    assert t.pop("mine", None) is None and "mine" not in t
    with pytest.raises(UnknownNameError):
        del t["never"]
    dict.__setitem__(t, "forced", 1.5)  # past every check: still shown
    html = t._repr_html_()
    assert "forced" in html and "1.5<" in html and "1.50 us" in html
    assert set(TELEMETRY_KEYS) <= set(t)
