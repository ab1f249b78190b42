"""The JSON lattice form for HTTP clients: :func:`lattice_from_json` and :func:`lattice_to_json`.

A lattice is one JSON object::

    {"key": "utt1",                        # required, a string: the utterance id
     "start": 0,                           # required, an integer: the start state
     "arcs": [[0, 1, "hello", -10.5, -2.0],   # required: [src, dst, word, acoustic, graph]
              [0, 1, null, -12.0, 0],          # null (or "<eps>") is epsilon, no word
              [1, 2, "world", -20.25, -3.5]],
     "finals": [[2, 0.0, -0.5]],           # required, non-empty: [state, acoustic, graph]
     "num_states": 3,                      # optional: the largest state id + 1, checked
     "meta": {"lmscale": 14.0}}            # optional, an object: format facts, kept as they are

States are integers ``0 .. num_states - 1``; a word is a non-empty string or null; scores are
numbers (integers allowed), natural-log, higher is better: ``acoustic`` is the acoustic
log-likelihood and ``graph`` the LM / graph log-probability, unscaled; a final state's pair is its
final weight. Each final state is listed once. No other top-level names are allowed (a typo
such as ``"final"`` is an error, not ignored). The lattice must be acyclic, with every state on
a path from the start to a final state.

:func:`lattice_from_json` takes the parsed object (or JSON text, which it parses); the symbol
table it builds is ``("<eps>", words in order of first appearance)``. Errors are
:class:`LatticeFormatError` with ``field`` the JSON path of the bad value, e.g. ``arcs[3][2]``.

:func:`lattice_to_json` writes that form (epsilon as null, floats as Python floats, -0.0 as 0.0,
``num_states`` always, ``meta`` when not empty); arc, state and final extras are not written.
``lattice_to_json(lattice_from_json(x))`` gives ``x`` back for objects written that way.
"""

from __future__ import annotations

import json
import math
from typing import Any

from lattices.lattice import EPSILON, Lattice, LatticeFormatError, describe

_NAMES = ("key", "start", "arcs", "finals", "num_states", "meta")


class _Json:
    """Checks on one object, raising LatticeFormatError with the JSON path as field."""

    def __init__(self, source: str | None) -> None:
        self.source, self.key = source, None

    def fail(self, message: str, path: str | None) -> LatticeFormatError:
        return LatticeFormatError(message, source=self.source, key=self.key, field=path)

    def integer(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"must be an integer, got {describe(value)}", path)
        if value < 0:
            raise self.fail(f"must not be negative, got {value}", path)
        return value

    def number(self, value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(f"must be a number, got {describe(value)}", path)
        try:
            result = float(value)
        except OverflowError:
            raise self.fail("is too large for a float", path) from None
        if not math.isfinite(result):
            raise self.fail(f"must be finite, got {result}", path)
        return result

    def rows(self, obj: dict[str, Any], name: str, width: int) -> list[list[Any]]:
        rows = obj[name]
        if not isinstance(rows, list):
            raise self.fail(f"must be a list, got {describe(rows)}", name)
        for i, row in enumerate(rows):
            if not isinstance(row, list) or len(row) != width:
                raise self.fail(f"must be a list of {width} entries, got {describe(row)}", f"{name}[{i}]")
        return rows


def lattice_from_json(obj: Any, source: str | None = None) -> Lattice:
    """A :class:`Lattice` from the JSON form in the module docstring (a parsed object or text)."""
    j = _Json(source)
    if isinstance(obj, (str, bytes, bytearray)):
        try:
            obj = json.loads(obj)
        except (ValueError, RecursionError) as exc:
            line = getattr(exc, "lineno", None)
            raise LatticeFormatError(f"not valid JSON: {getattr(exc, 'msg', exc)}", source=source, line=line) from None
    if not isinstance(obj, dict):
        raise j.fail(f"a lattice must be a JSON object, got {describe(obj)}", None)
    if isinstance(obj.get("key"), str):
        j.key = obj["key"]
    unknown = [name for name in obj if name not in _NAMES]
    if unknown:
        raise j.fail(f"unknown name (allowed: {', '.join(_NAMES)})", str(unknown[0]))
    for name in ("key", "start", "arcs", "finals"):
        if name not in obj:
            raise j.fail("is missing", name)
    if not isinstance(obj["key"], str):
        raise j.fail(f"must be a string, got {describe(obj['key'])}", "key")
    start = j.integer(obj["start"], "start")
    symbols, ids = [EPSILON], {EPSILON: 0}
    arcs = []
    for i, (src, dst, word, acoustic, graph) in enumerate(j.rows(obj, "arcs", 5)):
        path = f"arcs[{i}]"
        if word is not None and (not isinstance(word, str) or not word):
            raise j.fail(f"a word must be a non-empty string or null, got {describe(word)}", f"{path}[2]")
        if word is not None and word not in ids:
            ids[word] = len(symbols)
            symbols.append(word)
        arcs.append((j.integer(src, f"{path}[0]"), j.integer(dst, f"{path}[1]"), 0 if word is None else ids[word],
                     j.number(acoustic, f"{path}[3]"), j.number(graph, f"{path}[4]")))
    finals: dict[int, tuple[float, float]] = {}
    for i, (state, acoustic, graph) in enumerate(j.rows(obj, "finals", 3)):
        state = j.integer(state, f"finals[{i}][0]")
        if state in finals:
            raise j.fail(f"state {state} is listed as final twice", f"finals[{i}][0]")
        finals[state] = (j.number(acoustic, f"finals[{i}][1]"), j.number(graph, f"finals[{i}][2]"))
    if not finals:
        raise j.fail("must list at least one final state", "finals")
    largest = max([start, *finals, *(s for a in arcs for s in a[:2])])
    if largest > len(arcs):  # also keeps a huge id from allocating huge tensors
        raise j.fail(f"state {largest} is used, but a lattice with {len(arcs)} arcs has at most "
                     f"{len(arcs) + 1} states (the others are unreachable)", None)
    num_states = largest + 1
    if "num_states" in obj and j.integer(obj["num_states"], "num_states") != num_states:
        raise j.fail(f"is {obj['num_states']}, but the states used are 0..{largest} "
                     "(states outside them could not be reached)", "num_states")
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
        raise j.fail(f"must be an object, got {describe(meta)}", "meta")
    try:
        return Lattice.from_arcs(obj["key"], arcs, finals, tuple(symbols), start=start, num_states=num_states,
                                 meta=json.loads(json.dumps(meta)))
    except LatticeFormatError as err:
        raise err.located(source=source, key=j.key) from None
    except (TypeError, ValueError, RecursionError) as exc:  # meta that is no JSON (NaN is allowed by json)
        raise j.fail(f"must hold plain JSON values: {exc}", "meta") from None


def _float(value: float) -> float:
    return value + 0.0  # -0.0 becomes 0.0


def lattice_to_json(lattice: Lattice) -> dict[str, Any]:
    """The JSON form of ``lattice`` (see the module docstring); ``json.dumps`` it to send it."""
    symbols = lattice.symbols
    words = [None if w == 0 else symbols[w] for w in lattice.words.tolist()]
    arcs = [[s, d, w, _float(a), _float(g)] for s, d, w, a, g in zip(
        lattice.src.tolist(), lattice.dst.tolist(), words, lattice.acoustic.tolist(), lattice.graph.tolist())]
    finals = [[s, _float(a), _float(g)] for s, a, g in zip(
        lattice.finals.tolist(), lattice.final_acoustic.tolist(), lattice.final_graph.tolist())]
    out: dict[str, Any] = {"key": lattice.key, "start": int(lattice.start), "arcs": arcs, "finals": finals,
                           "num_states": int(lattice.num_states)}
    if lattice.meta:
        out["meta"] = json.loads(json.dumps(lattice.meta))
    return out
