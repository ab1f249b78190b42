"""Compiled kernels: loops over a lattice's arcs that whole-array numpy steps cannot express
without a call per level, compiled by numba (a JIT compiler for numeric Python).

numba is imported when a kernel is first called, not when the module is: importing the core
stays torch, numpy and safetensors (``tests/test_layering.py``), and a process that never
calls a kernel never pays numba's import (about 0.3 s). The machine code is cached beside the
kernel's file (or in the user's cache folder), so only the first run on a machine compiles it;
where neither can be written (a read-only install, no home folder) each process compiles it
again instead of failing.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any


def compiled(function: Callable) -> Callable:
    """``function`` compiled by numba (``njit``, cached, ``nogil``) at its first call; numba's
    dispatcher is then the wrapper's ``dispatcher`` (None before). A kernel may call another
    (numba compiles the callee first, :func:`_jit`)."""

    @functools.wraps(function)
    def call(*args: Any) -> Any:
        return _dispatcher(call)(*args)

    call.dispatcher = None  # type: ignore[attr-defined]
    call.kernel = function  # type: ignore[attr-defined]
    return call


def _dispatcher(wrapper: Any) -> Callable:
    if wrapper.dispatcher is None:
        wrapper.dispatcher = _jit(wrapper.kernel)
    return wrapper.dispatcher


def _jit(function: Callable) -> Callable:
    """numba's dispatcher of ``function``, the kernels it calls by a global name (wrappers of
    :func:`compiled`) replaced by their own dispatchers, which nopython code can call."""
    import numba

    callees = {name: _dispatcher(value) for name in function.__code__.co_names
               if hasattr(value := function.__globals__.get(name), "kernel") and hasattr(value, "dispatcher")}
    if callees:
        plain = function
        function = types.FunctionType(plain.__code__, {**plain.__globals__, **callees}, plain.__name__,
                                      plain.__defaults__, plain.__closure__)
        function.__qualname__, function.__module__ = plain.__qualname__, plain.__module__
    try:
        return numba.njit(cache=True, nogil=True)(function)
    except RuntimeError as err:  # numba: "cannot cache function ...: no locator available for file ..."
        if "no locator available" not in str(err):
            raise
        return numba.njit(nogil=True)(function)
