"""The backend registry: register checks what it is given, and one bad registration cannot break
the errors every later backend lookup gives."""
from __future__ import annotations

import pytest

import vyre_numba as vn
from vyre_numba import registry
from vyre_numba.errors import BackendUnavailableError, DispatchError


@pytest.fixture
def clean(monkeypatch):
    for table in (registry._FACTORIES, registry._PROBES, registry._INSTANCES):
        monkeypatch.setattr(registry, {id(registry._FACTORIES): "_FACTORIES", id(registry._PROBES): "_PROBES",
                                       id(registry._INSTANCES): "_INSTANCES"}[id(table)], dict(table))


@pytest.mark.parametrize("args,fragment", [
    ((1, lambda: None, lambda: None), "name=1 is not a backend name"),
    (("", lambda: None, lambda: None), "name='' is not a backend name"),
    (("x", 5, lambda: None), "factory=5 is not callable"),
    (("x", lambda: None, None), "probe=None is not callable"),
])
def test_register_refuses_what_it_cannot_use(clean, args, fragment):
    """Regression (a red-team): register(1, ...) made every later unknown-backend error a raw
    TypeError (sorting an int among the names), and a non-callable factory raised at first use."""
    with pytest.raises(DispatchError, match=f"register: {fragment}.*Fix:"):
        registry.register(*args)
    with pytest.raises(BackendUnavailableError, match="no backend named 'refrence'.*Fix:"):
        vn.get_backend("refrence")


def test_a_factory_must_make_a_backend_and_a_name_registered_again_is_made_afresh(clean):
    registry.register("five", lambda: 5, lambda: None)
    with pytest.raises(BackendUnavailableError, match="'five''s factory returned an int.*Fix:"):
        vn.get_backend("five")
    ref = vn.get_backend("reference")
    registry.register("five", lambda: ref, lambda: None)
    assert vn.get_backend("five") is ref
    other = type(ref)()
    registry.register("five", lambda: other, lambda: None)
    assert vn.get_backend("five") is other


def test_a_name_registered_again_while_its_old_backend_is_made_keeps_the_new_one(clean):
    """Regression (the session's review): an in-flight get_backend of the old factory stored its
    backend after register had dropped the name's instance, for good."""
    ref = vn.get_backend("reference")
    old, new = type(ref)(), type(ref)()

    def slow_old():
        registry.register("swap", lambda: new, lambda: None)  # registered again while the old one is made
        return old
    registry.register("swap", slow_old, lambda: None)
    assert vn.get_backend("swap") is old  # what that call's factory made
    assert vn.get_backend("swap") is new and vn.get_backend("swap") is new


@pytest.mark.parametrize("answer, said", [
    (True, r"the probe registered for backend 'mine' returned True, neither None \(usable\) nor a reason\. Fix:"),
    ("", r"returned '', neither None"),
    ("needs a thing", r"backend 'mine' is unavailable: needs a thing\. Fix: see what backend 'mine' needs"),
    (ZeroDivisionError, r"the probe registered for backend 'mine' raised ZeroDivisionError.*Fix: make the probe"),
])
def test_a_probes_odd_answer_is_told_with_a_fix(clean, answer, said):
    """Regression (a red-team): a probe returning True (meant as "usable") gave "unavailable: True"
    with no Fix; a probe that raised reached the caller raw."""
    from vyre_numba.reference import ReferenceBackend

    def probe():
        if answer is ZeroDivisionError:
            return 1 / 0
        return answer

    registry.register("mine", ReferenceBackend, probe)
    with pytest.raises(BackendUnavailableError, match=said):
        vn.get_backend("mine")


def test_no_usable_backend_at_all_is_told_with_each_ones_reason(clean):
    """Regression (a red-team): with 'reference' registered again as unusable (and no GPU), the
    default get_backend() raised a raw IndexError."""
    from vyre_numba.reference import ReferenceBackend

    registry.register("cuda", ReferenceBackend, lambda: "no GPU here. Fix: use another machine.")
    registry.register("reference", ReferenceBackend, lambda: "switched off here. Fix: turn it on.")
    with pytest.raises(BackendUnavailableError, match=r"^no backend can run here \(cuda: no GPU here\. Fix: use another "
                                                      r"machine; reference: switched off here\. Fix: turn it on\)\. Fix: "):
        vn.get_backend()


def test_no_usable_backend_is_told_from_one_answer_of_each_probe(clean):
    """Regression (a review): the message asked each probe again, so a probe whose answer changed
    in between (a GPU freed) gave None to format, a raw AttributeError."""
    from vyre_numba.reference import ReferenceBackend

    answers = iter(["busy. Fix: wait.", None, None])
    registry.register("cuda", ReferenceBackend, lambda: "no GPU here. Fix: use another machine.")
    registry.register("reference", ReferenceBackend, lambda: next(answers))
    with pytest.raises(BackendUnavailableError, match=r"reference: busy\. Fix: wait\)"):
        vn.get_backend()
    assert isinstance(vn.get_backend(), ReferenceBackend)  # usable now


def test_info_lists_every_backend_when_a_registered_probe_raises(clean, capsys):
    """Regression (a review): `vyre-numba info` stopped after "backends:" with one error line."""
    from vyre_numba import cli
    from vyre_numba.reference import ReferenceBackend

    def broken():
        raise RuntimeError("boom")

    registry.register("cuda", ReferenceBackend, broken)
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "cuda       unavailable: the probe registered for backend 'cuda' raised RuntimeError (boom)" in out
    assert "reference  available" in out and "default backend: reference" in out
