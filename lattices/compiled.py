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
from collections.abc import Callable
from typing import Any


def compiled(function: Callable) -> Callable:
    """``function`` compiled by numba (``njit``, cached, ``nogil``) at its first call; numba's
    dispatcher is then the wrapper's ``dispatcher`` (None before)."""

    @functools.wraps(function)
    def call(*args: Any) -> Any:
        if call.dispatcher is None:  # type: ignore[attr-defined]
            call.dispatcher = _jit(function)  # type: ignore[attr-defined]
        return call.dispatcher(*args)  # type: ignore[attr-defined]

    call.dispatcher = None  # type: ignore[attr-defined]
    return call


def _jit(function: Callable) -> Callable:
    import numba

    try:
        return numba.njit(cache=True, nogil=True)(function)
    except RuntimeError as err:  # numba: "cannot cache function ...: no locator available for file ..."
        if "no locator available" not in str(err):
            raise
        return numba.njit(nogil=True)(function)
