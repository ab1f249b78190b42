"""OpenFst text format (what ``fstprint`` prints), one FST per text.

Lines, fields separated by spaces or tabs (empty and whitespace-only lines are ignored)::

    src dst label [weight]              an arc of an acceptor
    src dst ilabel olabel [weight]      an arc of a transducer (the word is the olabel)
    state [weight]                      a final state

A missing weight is One (cost 0). A weight is either a tropical cost ``w`` (``3.25``) or a Kaldi
``LatticeWeight`` pair ``g,a`` (graph cost, acoustic cost: ``3.25,-120.5``); one FST cannot mix
the two. (A ``g,a,tids`` weight belongs to a Kaldi ``CompactLattice``: use
:func:`lattices.formats.kaldi.read_kaldi`.)

Acceptor or transducer: an FST with a 5-field arc line is a transducer, one with a 3-field arc
line an acceptor (not both). When every arc line has 4 fields (``fstprint`` leaves out One
weights, so both kinds can look alike), the 4th fields decide: if one of them is a number with
a point or exponent, or has a comma, they are weights (acceptor); otherwise (plain integers or
words) they are olabels (transducer).

Labels are symbols (``HELLO``, ``<eps>``) or integer ids: if every word label is an integer they
are ids into ``symbols`` (required); otherwise spellings, with words of ``symbols`` keeping
their ids, ``<eps>`` as 0 and unseen words appended. A transducer's ilabels may be anything.

The :class:`~lattices.lattice.Lattice`:

* ``start``: the state on the first line (as ``fstcompile`` has it); ``num_states``: the highest
  state id + 1 (every id must appear: no gaps). ``finals`` are sorted by state.
* tropical weights: ``graph = -w``, ``acoustic = 0``; pairs: ``graph = -g``, ``acoustic = -a``.
* ``meta["openfst_type"]``: ``"acceptor"`` | ``"transducer"``; ``meta["openfst_weight"]``:
  ``"tropical"`` | ``"lattice"`` (``"tropical"`` when no weight is written);
  ``meta["openfst_word_ids"]``: whether labels were integer ids.
* transducers: ``arc_extra["openfst_ilabel"]``, int64 ``(A,)`` if every ilabel is an integer,
  else a tuple of the ilabel strings.

:func:`write_openfst` writes the same kind back in ``fstprint`` order (the start state's arcs
first, then state by state, each final line after the state's arcs), with every weight written
out (so the acceptor/transducer and tropical/lattice guesses above read it back the same way);
a tropical weight is the combined cost ``-(graph + acoustic)``, printed with a point (``3.0``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lattices.formats._text import (
    GraphText, Where, check_token, format_float, is_int, is_number, label_writer, numbered_lines, print_order,
    resolve_words,
)
from lattices.lattice import Lattice, LatticeFormatError

__all__ = ["read_openfst", "write_openfst"]

ACCEPTOR = "acceptor"
TRANSDUCER = "transducer"
TROPICAL = "tropical"
LATTICE = "lattice"

Lines = list[tuple[int, list[str]]]


def read_openfst(text: str, symbols: Sequence[str] | None = None, source: str | None = None,
                 key: str = "lattice") -> Lattice:
    """Read one FST in OpenFst text format into a lattice named ``key`` (see the module docstring).

    ``symbols[i]`` is the word with id ``i`` (``symbols[0] == "<eps>"``); required when labels
    are integer ids. Raises :class:`LatticeFormatError` naming source, line and field.
    """
    where = Where(source, key)
    lines = [(n, f) for n, _, f in numbered_lines(text) if f]
    if not lines:
        raise where.error("the text has no arc or final-state lines", None, "lattice")
    for n, f in lines:
        if len(f) > 5:
            raise where.error(f"{len(f)} fields is too many: expected 'src dst label [weight]', "
                              "'src dst ilabel olabel [weight]' or 'state [weight]'", n, "fields")
    transducer = _is_transducer(lines, where)
    graph = GraphText(key, lines[0][0], "olabel" if transducer else "label")
    ilabels: list[str] = []
    ilabel_lines: list[int] = []
    weight_kind: str | None = None
    weight_line = 0
    for n, f in lines:
        if len(f) <= 2:
            state, weight = where.state(f[0], n, "state"), (f[1] if len(f) == 2 else None)
        else:
            src, dst = where.state(f[0], n, "src"), where.state(f[1], n, "dst")
            if transducer:
                ilabels.append(f[2])
                ilabel_lines.append(n)
            word_at = 3 if transducer else 2
            word, weight = f[word_at], (f[word_at + 1] if len(f) == word_at + 2 else None)
        g = a = 0.0
        if weight is not None:
            kind = LATTICE if "," in weight else TROPICAL
            if weight_kind is None:
                weight_kind, weight_line = kind, n
            elif kind != weight_kind:
                raise where.error(f"a {kind} weight {weight!r}, but line {weight_line} has a {weight_kind} weight; "
                                  "one FST cannot mix them", n, "weight")
            if weight.count(",") == 2:
                raise where.error(f"weight {weight!r} is a Kaldi CompactLattice weight 'graph,acoustic,tids': read "
                                  "it with read_kaldi", n, "weight")
            g, a = where.pair(weight, n, "weight") if kind == LATTICE else (where.cost(weight, n, "weight"), 0.0)
        if len(f) <= 2:
            graph.add_final(where, n, state, g, a)
        else:
            graph.add_arc(n, src, dst, word, g, a)
    table, (words,), are_ids = resolve_words([graph], symbols, source)
    meta = {"openfst_type": TRANSDUCER if transducer else ACCEPTOR, "openfst_weight": weight_kind or TROPICAL,
            "openfst_word_ids": are_ids}
    arc_extra = {}
    if transducer:
        if all(is_int(label) for label in ilabels):
            arc_extra["openfst_ilabel"] = torch.tensor(
                [where.integer(label, n, "ilabel", "ilabel") for label, n in zip(ilabels, ilabel_lines)],
                dtype=torch.int64)
        else:
            arc_extra["openfst_ilabel"] = tuple(ilabels)
    return graph.to_lattice(where, table, words, meta, arc_extra, {})


def write_openfst(lattice: Lattice, use_ids: bool | None = None) -> str:
    """Write one lattice in OpenFst text format that :func:`read_openfst` reads back.

    The kind (``meta["openfst_type"]``, default acceptor) and weight (``meta["openfst_weight"]``,
    default tropical) are those it was read with. Labels are ids if ``use_ids``, spellings if
    not, and when ``None`` as read (``meta["openfst_word_ids"]``, default spellings). A
    transducer without ``arc_extra["openfst_ilabel"]`` gets its olabels as ilabels; one without
    arcs reads back as an acceptor (its text has no arc line to tell). Raises
    :class:`LatticeFormatError` for a label that cannot be one text field.
    """
    kind = lattice.meta.get("openfst_type", ACCEPTOR)
    weight_kind = lattice.meta.get("openfst_weight", TROPICAL)
    if kind not in (ACCEPTOR, TRANSDUCER):
        raise LatticeFormatError(f"unknown OpenFst type {kind!r}", key=lattice.key, field="meta['openfst_type']")
    if weight_kind not in (TROPICAL, LATTICE):
        raise LatticeFormatError(f"unknown OpenFst weight {weight_kind!r}", key=lattice.key,
                                 field="meta['openfst_weight']")
    ids = bool(lattice.meta.get("openfst_word_ids", False)) if use_ids is None else use_ids
    label = label_writer(lattice, ids)

    def weights(graph: torch.Tensor, acoustic: torch.Tensor) -> list[str]:
        if weight_kind == TROPICAL:
            return [format_float(0.0 - (g + a), point=True) for g, a in zip(graph.tolist(), acoustic.tolist())]
        return [f"{format_float(0.0 - g)},{format_float(0.0 - a)}" for g, a in zip(graph.tolist(), acoustic.tolist())]

    arc_weights = weights(lattice.graph, lattice.acoustic)
    final_weights = weights(lattice.final_graph, lattice.final_acoustic)
    src, dst, words, finals = (t.tolist() for t in (lattice.src, lattice.dst, lattice.words, lattice.finals))
    ilabels = _ilabels(lattice, label, words) if kind == TRANSDUCER else None
    lines = []
    for is_arc, i in print_order(lattice):
        if not is_arc:
            lines.append(f"{finals[i]} {final_weights[i]}")
        elif ilabels is None:
            lines.append(f"{src[i]} {dst[i]} {label(words[i])} {arc_weights[i]}")
        else:
            lines.append(f"{src[i]} {dst[i]} {ilabels[i]} {label(words[i])} {arc_weights[i]}")
    return "".join(line + "\n" for line in lines)


def _is_transducer(lines: Lines, where: Where) -> bool:
    """Whether the arc lines are a transducer's (see the module docstring for the rule)."""
    five = next((n for n, f in lines if len(f) == 5), None)
    three = next((n for n, f in lines if len(f) == 3), None)
    if five is not None and three is not None:
        raise where.error(f"arc lines with 3 fields (acceptor, line {three}) and 5 fields (transducer, line {five}); "
                          "one FST cannot mix them", max(five, three), "fields")
    if five is not None or three is not None:
        return five is not None
    fourth = [f[3] for _, f in lines if len(f) == 4]
    if not fourth:
        return False
    return not any("," in t or (is_number(t) and not is_int(t)) for t in fourth)


def _ilabels(lattice: Lattice, label: object, words: list[int]) -> list[str]:
    values = lattice.arc_extra.get("openfst_ilabel")
    if values is None:
        return [label(w) for w in words]  # type: ignore[operator]
    if isinstance(values, torch.Tensor):
        return [str(v) for v in values.tolist()]
    return [check_token(str(v), "ilabel", lattice.key, "openfst_ilabel") for v in values]
