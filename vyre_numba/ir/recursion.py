"""Recursion with an explicit stack, so walkers over deep IR never hit Python's recursion limit.

A walker is written as a generator: where it would call itself it yields the sub-walk (another
generator) and receives that walk's result, as `a = yield self.expr(x.a)`; its own result is its
return value. `drive(walk)` runs it with a list as the stack. A yielded value that is not a
generator is sent straight back, so a walker may call helpers that are generators or not. An
exception raised in a sub-walk is thrown into its caller at the `yield`, as a call would raise it.

    def depth(e):
        deepest = 0
        for child in e.children():
            deepest = max(deepest, (yield depth(child)))
        return 1 + deepest

    drive(depth(expr))
"""
from __future__ import annotations

from types import GeneratorType
from typing import Any, Generator

Walk = Generator[Any, Any, Any]


def drive(walk: Walk | Any) -> Any:
    """Run the generator `walk` (and every sub-walk it yields) to completion; its return value."""
    if not isinstance(walk, GeneratorType):
        return walk
    stack = [walk]
    value: Any = None
    error: BaseException | None = None
    while True:
        top = stack[-1]
        try:
            out = top.send(value) if error is None else top.throw(error)
        except StopIteration as done:
            stack.pop()
            value, error = done.value, None
            if not stack:
                return value
            continue
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller, as a call would
            stack.pop()
            if not stack:
                raise
            value, error = None, e
            continue
        error = None
        if isinstance(out, GeneratorType):
            stack.append(out)
            value = None
        else:
            value = out
