"""k2 lattices without k2: the dict of ``k2.Fsa.as_dict()``, as saved with ``torch.save``.

A single FSA (``fsa.as_dict()`` of an ``Fsa`` with ``num_axes == 2``)::

    {"arcs": int32 (num_arcs, 4),       # src, dst, label, score; column 3 holds the float32
                                        # score's bit pattern (read with .view(torch.float32))
     "aux_labels": int32 (num_arcs,),   # optional: word ids (transducer); absent for acceptors
     "lm_scores": float32 (num_arcs,),  # optional: LM part of the score (icefall)
     "<name>": tensor (num_arcs, ...),  # optional: any other per-arc attribute
     "<name>": int | float | str ...}   # optional: non-tensor attributes

An FsaVec (``num_axes == 3``; k2's ``FsaVecToTensor``) stores ``arcs`` as one 1-D int32 tensor
``[num_fsas, 0, row_splits1 (num_fsas + 1), row_splits12 (num_fsas + 1), arcs (4 * num_arcs)]``:
``row_splits1`` are the cumulative state counts and ``row_splits12`` the cumulative arc counts of
the FSAs; the arcs' src and dst are numbered within their FSA; per-arc attributes run over the
arcs of all FSAs in order. :func:`read_k2` reads both layouts, and a list of such dicts.

k2 conventions, and how they map onto :class:`Lattice`:
  * the start state is 0; the final state is the last state, ``num_states - 1``; exactly the arcs
    into it carry label -1 (and aux_label -1). For a single FSA the number of states is the
    destination of the -1 arcs plus one. Here: one final state with weight 0, and the -1 labels
    become epsilon (word 0). An aux_label other than -1 on an arc into the final state (k2 puts -1
    there) is kept as that arc's word.
  * words are ``aux_labels`` when present (the labels, token ids, are then kept in
    ``arc_extra["k2_labels"]``, int32 with the -1s), else the labels; 0 is epsilon.
  * scores are log-likelihoods, higher is better: ``graph = lm_scores`` (0 without them) and
    ``acoustic = score - lm_scores``, so ``acoustic + graph`` is the k2 score.
  * other per-arc tensors go to ``arc_extra["k2_<name>"]``; plain non-tensor attributes (int,
    float, str, bool, None) to ``meta["k2_attributes"]``; other non-tensors are dropped, and so
    are ``scores`` and ``labels`` (copies of the ``arcs`` columns) if a dict has them.
  * k2 has no word spellings: ``symbols`` is the table the ids index (every id must be inside it);
    without it the table is made up as ``("<eps>", "1", "2", ...)`` up to the largest id (at most
    2**20) and ``meta["k2_symbols"] = "synthesized"``.

:func:`write_k2` writes k2's single-FSA layout, one dict per lattice: a dict for one lattice, a
list of dicts for several (each loads with ``k2.Fsa.from_dict``; ``k2.create_fsa_vec`` stacks
them). States are renumbered so that the start is 0 and the final state last, arcs are sorted by
source state, scores are float32. A lattice with several final states, a final weight other than
0, a final state with arcs leaving it or words on the arcs into it gets a new super-final state:
an arc with label -1 from every final state carries that state's final weights (a rescored
lattice, with ``</s>`` log-probs as final weights, always gets one). Token labels kept from a k2
input (``arc_extra["k2_labels"]``) that are -1 on arcs into such a formerly final state become 0
(epsilon), so the output keeps k2's rules: exactly the arcs into the last state have label -1 (and
aux_label -1), no arc leaves it, and it reads back to the same paths and scores (float32).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from lattices.lattice import EPSILON, Lattice, LatticeFormatError

_PLAIN = (int, float, str, bool, type(None))
_MAX_SYNTHESIZED = 1 << 20  # made-up symbol tables stop here (a tuple of that many strings)
_SKIPPED = ("arcs", "aux_labels", "lm_scores", "scores", "labels")


def load_k2_bytes(data: bytes, symbols: Sequence[str] | None = None, source: str | None = None,
                  key: str = "lattice") -> list[Lattice]:
    """Read the bytes of a file written with ``torch.save(fsa.as_dict(), path)`` (or a list of such
    dicts): what :func:`lattices.formats.read_lattice_file` does with a k2 file.

    Only tensors and plain containers are unpickled (``weights_only=True``): data holding any
    other object, or damaged data, raises LatticeFormatError naming ``source``. Keys as
    :func:`read_k2`'s (``key``, or ``key-0``, ``key-1``... for several).
    """
    try:
        obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - any load failure is bad input, reported with the file
        raise LatticeFormatError(f"cannot load a k2 lattice file (torch.save of Fsa.as_dict()): "
                                 f"{type(exc).__name__}: {str(exc)[:300]}", source=source, key=key) from None
    return read_k2(obj, symbols=symbols, source=source, key=key)


def read_k2(obj: Mapping[str, Any] | Sequence[Mapping[str, Any]], symbols: Sequence[str] | None = None,
            source: str | None = None, key: str = "lattice") -> list[Lattice]:
    """Lattices from a k2 ``as_dict()`` dict (Fsa or FsaVec) or a list of them (see the module
    docstring). Keys are ``key`` for a single lattice, else ``f"{key}-{i}"``."""
    if isinstance(obj, Mapping):
        dicts, prefixes = [obj], [""]
    elif isinstance(obj, Sequence) and not isinstance(obj, (str, bytes, bytearray)):
        dicts, prefixes = list(obj), [f"[{i}]." for i in range(len(obj))]
    else:
        raise LatticeFormatError(f"expected a dict of k2 FSA attributes or a list of them, got {type(obj).__name__}",
                                 source=source, key=key)
    pieces: list[tuple[str, dict[str, Any]]] = []
    for d, prefix in zip(dicts, prefixes):
        pieces += _split(d, prefix, source, key)
    if symbols is not None:
        table = tuple(symbols)  # the caller's tuple itself: lattices share it, nothing walks it per lattice
        if not table:
            raise LatticeFormatError("the symbol table is empty", source=source, key=key, field="symbols")
        synthesized = False
    else:
        top = max((int(p["words"].max()) for _, p in pieces if p["words"].numel()), default=0)
        if top > _MAX_SYNTHESIZED:
            raise LatticeFormatError(f"word id {top} is too large to make up a symbol table for; pass the symbols",
                                     source=source, key=key,
                                     field="aux_labels" if pieces[0][1]["aux"] is not None else "arcs")
        table, synthesized = (EPSILON, *(str(i) for i in range(1, top + 1))), True
    lattices = []
    for i, (where, piece) in enumerate(pieces):
        name = key if len(pieces) == 1 else f"{key}-{i}"
        lattices.append(_to_lattice(piece, table, synthesized, name, where, source))
    return lattices


def _split(d: Any, prefix: str, source: str | None, key: str) -> list[tuple[str, dict[str, Any]]]:
    """One dict -> per-FSA pieces: ``(where, {src, dst, labels, scores, words, lm, extra, meta})``."""
    def fail(message: str, field: str) -> LatticeFormatError:
        return LatticeFormatError(message, source=source, key=key, field=prefix + field)

    if not isinstance(d, Mapping):
        raise fail(f"expected a dict of k2 FSA attributes, got {type(d).__name__}", "")
    if "arcs" not in d:
        raise fail("missing: a k2 FSA dict needs its arcs", "arcs")
    for name, value in d.items():
        if isinstance(value, Tensor) and (value.layout != torch.strided or value.device.type == "meta"):
            raise fail(f"must be a dense tensor with data, got layout {value.layout} on {value.device}", str(name))
    arcs = d["arcs"]
    if not isinstance(arcs, Tensor) or arcs.dtype != torch.int32 or arcs.dim() not in (1, 2):
        raise fail("must be an int32 tensor of shape (num_arcs, 4), or 1-D for an FsaVec, got "
                   + (f"{arcs.dtype} {tuple(arcs.shape)}" if isinstance(arcs, Tensor) else type(arcs).__name__), "arcs")
    arcs = arcs.detach().to("cpu").contiguous()
    if arcs.dim() == 2:
        if arcs.shape[1] != 4:
            raise fail(f"must have 4 columns (src, dst, label, score), got shape {tuple(arcs.shape)}", "arcs")
        table, state_splits, arc_splits = arcs, None, [0, arcs.shape[0]]
    else:
        table, state_splits, arc_splits = _fsa_vec(arcs, fail)
    num_arcs = table.shape[0]
    columns: dict[str, Tensor] = {}
    meta: dict[str, Any] = {}
    for name, value in d.items():
        if not isinstance(name, str):
            raise fail(f"attribute names must be strings, got {name!r}", "")
        if name in _SKIPPED and name not in ("aux_labels", "lm_scores"):
            continue
        if isinstance(value, Tensor):
            if value.dim() == 0 or value.shape[0] != num_arcs:
                raise fail(f"has shape {tuple(value.shape)}, expected {num_arcs} entries (one per arc)", name)
            columns[name] = value.detach().to("cpu")
        elif name in ("aux_labels", "lm_scores"):
            raise fail(f"must be a tensor, got {type(value).__name__}", name)
        elif isinstance(value, _PLAIN):
            meta[name] = value
    aux, lm = columns.pop("aux_labels", None), columns.pop("lm_scores", None)
    if aux is not None and (aux.dim() != 1 or aux.dtype.is_floating_point or aux.dtype.is_complex or aux.dtype == torch.bool):
        raise fail(f"must be an integer tensor (num_arcs,), got {aux.dtype} {tuple(aux.shape)}", "aux_labels")
    if lm is not None:
        if lm.dim() != 1 or not lm.dtype.is_floating_point:
            raise fail(f"must be a float tensor (num_arcs,), got {lm.dtype} {tuple(lm.shape)}", "lm_scores")
        lm = lm.to(torch.float64)
        if not bool(torch.isfinite(lm).all()):
            raise fail(f"entry {int((~torch.isfinite(lm)).nonzero()[0])} is not finite", "lm_scores")
    scores = table[:, 3].contiguous().view(torch.float32).to(torch.float64)
    if bool(scores.isnan().any()):
        raise fail(f"arc {int(scores.isnan().nonzero()[0])} has a NaN score (column 3)", "arcs")
    pieces = []
    for f in range(len(arc_splits) - 1):
        lo, hi = arc_splits[f], arc_splits[f + 1]
        where = prefix + (f"arcs (FSA {f} of the FsaVec)" if state_splits is not None else "arcs")
        num_states = None if state_splits is None else state_splits[f + 1] - state_splits[f]
        labels = table[lo:hi, 2]
        pieces.append((where, {
            "src": table[lo:hi, 0].to(torch.int64), "dst": table[lo:hi, 1].to(torch.int64),
            "labels": labels, "scores": scores[lo:hi], "num_states": num_states,
            "aux": None if aux is None else aux[lo:hi].to(torch.int64), "lm": None if lm is None else lm[lo:hi],
            "extra": {n: v[lo:hi] for n, v in columns.items()}, "meta": meta}))
        piece = pieces[-1][1]
        piece["words"] = (piece["aux"] if aux is not None else labels.to(torch.int64)).clamp(min=0)
    return pieces


def _fsa_vec(flat: Tensor, fail: Any) -> tuple[Tensor, list[int], list[int]]:
    """Decode k2's FsaVecToTensor layout into the (num_arcs, 4) table and the two row splits."""
    if flat.numel() < 4:
        raise fail(f"a 1-D (FsaVec) arcs tensor needs at least 4 entries, got {flat.numel()}", "arcs")
    n = int(flat[0])
    if n < 0 or 2 + 2 * (n + 1) > flat.numel():
        raise fail(f"FsaVec header says {n} FSAs, which does not fit {flat.numel()} entries", "arcs")
    values = flat[2:2 + 2 * (n + 1)].tolist()
    state_splits, arc_splits = values[:n + 1], values[n + 1:]
    for name, splits in (("row_splits1", state_splits), ("row_splits12", arc_splits)):
        if splits[0] != 0 or any(b < a for a, b in zip(splits, splits[1:])):
            raise fail(f"FsaVec {name} {splits[:8]} must start at 0 and never decrease", "arcs")
    body = flat[2 + 2 * (n + 1):]
    if body.numel() != 4 * arc_splits[-1]:
        raise fail(f"FsaVec has {body.numel()} arc entries for {arc_splits[-1]} arcs (4 each)", "arcs")
    return body.view(-1, 4), state_splits, arc_splits


def _to_lattice(p: dict[str, Any], symbols: tuple[str, ...], synthesized: bool, key: str, where: str,
                source: str | None) -> Lattice:
    def fail(message: str, field: str = where) -> LatticeFormatError:
        return LatticeFormatError(message, source=source, key=key, field=field)

    src, dst, labels = p["src"], p["dst"], p["labels"]
    if src.numel() == 0:
        raise fail("has no arcs: k2's empty FSA is not a lattice")
    into_final = labels == -1
    if p["num_states"] is None:
        if not bool(into_final.any()):
            raise fail("no arc has label -1, so no arc enters the final state")
        num_states = int(dst[into_final].max()) + 1
    else:
        num_states = p["num_states"]
        if num_states < 2:
            raise fail(f"an FSA with arcs needs at least 2 states, got {num_states}")
    if num_states > src.numel() + 1:  # also keeps a huge state id from allocating huge tensors
        raise fail(f"{num_states} states for {src.numel()} arcs: some states are unreachable")
    final = num_states - 1
    if bool((src < 0).any() | (dst < 0).any() | (src >= num_states).any() | (dst >= num_states).any()):
        raise fail(f"a state id is outside 0..{final} (the final state, with the -1 arcs, must be last)")
    if not torch.equal(into_final, dst == final):
        bad = int((into_final != (dst == final)).nonzero()[0])
        raise fail(f"arc {bad}: exactly the arcs into the final state {final} must have label -1, "
                   f"got label {int(labels[bad])} into state {int(dst[bad])}")
    if bool((labels < -1).any()):
        raise fail(f"label {int(labels.min())} is negative")
    aux = p["aux"]
    field = "aux_labels" if aux is not None else where
    if aux is not None and bool(((aux == -1) & ~into_final).any() | (aux < -1).any()):
        bad = int((((aux == -1) & ~into_final) | (aux < -1)).nonzero()[0])
        raise fail(f"arc {bad} has aux_label {int(aux[bad])}; only arcs into the final state may have -1", field)
    words = p["words"].clone()
    words[into_final] = 0 if aux is None else torch.where(aux[into_final] == -1, 0, aux[into_final])
    if words.numel() and int(words.max()) >= len(symbols):
        raise fail(f"word id {int(words.max())} is outside the symbol table of {len(symbols)} entries", field)
    lm = p["lm"]
    graph = lm if lm is not None else torch.zeros_like(p["scores"])
    meta: dict[str, Any] = {"k2_lm_scores": lm is not None}
    if p["meta"]:
        meta["k2_attributes"] = dict(p["meta"])
    if synthesized:
        meta["k2_symbols"] = "synthesized"
    extra = {f"k2_{n}": v for n, v in p["extra"].items()}
    if aux is not None:
        extra["k2_labels"] = labels.clone()
    lattice = Lattice(key=key, num_states=num_states, start=0, src=src, dst=dst, words=words,
                      acoustic=p["scores"] - graph, graph=graph.clone(), finals=torch.tensor([final]),
                      final_acoustic=torch.zeros(1, dtype=torch.float64),
                      final_graph=torch.zeros(1, dtype=torch.float64), symbols=symbols, meta=meta, arc_extra=extra)
    try:
        return lattice.validate()
    except LatticeFormatError as err:
        raise err.located(source=source, key=key) from None


def write_k2(lattices: Sequence[Lattice]) -> dict[str, Any] | list[dict[str, Any]]:
    """k2 ``as_dict()`` dicts for ``lattices``: one dict for one lattice, a list for several (or
    none); every dict is k2's single-FSA layout (see the module docstring)."""
    if isinstance(lattices, Lattice):
        lattices = [lattices]
    dicts = [_to_dict(lattice) for lattice in lattices]
    return dicts[0] if len(dicts) == 1 else dicts


def _to_dict(lattice: Lattice) -> dict[str, Any]:
    lattice = lattice.to("cpu")
    n, start = lattice.num_states, lattice.start
    src, dst, words = lattice.src, lattice.dst, lattice.words
    acoustic, graph = lattice.acoustic, lattice.graph
    finals = lattice.finals
    into = dst == finals[0]
    direct = (finals.numel() == 1 and int(finals[0]) != start and float(lattice.final_acoustic[0]) == 0.0
              and float(lattice.final_graph[0]) == 0.0 and not bool((src == finals[0]).any())
              and not bool(words[into].any()))
    count = finals.numel()
    if direct:
        final = int(finals[0])
    else:  # a super-final state n; one arc from each final state carries its final weights
        final, n = n, n + 1
        src, dst = torch.cat([src, finals]), torch.cat([dst, torch.full((count,), final)])
        words = torch.cat([words, torch.zeros(count, dtype=words.dtype)])
        acoustic = torch.cat([acoustic, lattice.final_acoustic])
        graph = torch.cat([graph, lattice.final_graph])
    added = 0 if direct else count
    src, dst = _renumber(lattice, src, dst, final, n)
    perm = torch.argsort(src, stable=True)
    into_final = dst[perm] == n - 1
    extra = lattice.arc_extra
    labels = extra["k2_labels"].cpu() if isinstance(extra.get("k2_labels"), Tensor) else None
    if labels is not None:
        labels = torch.cat([labels.to(torch.int64), torch.full((added,), -1)])[perm]
        labels[(labels == -1) & ~into_final] = 0  # a kept -1 into a state that is no longer k2's final: epsilon
        aux = words[perm].clone()
        aux[into_final] = -1
    else:
        labels, aux = words[perm].clone(), None
    labels[into_final] = -1
    scores = (acoustic + graph)[perm].to(torch.float32)
    arcs = torch.stack([src[perm].to(torch.int32), dst[perm].to(torch.int32), labels.to(torch.int32),
                        scores.view(torch.int32)], dim=1).contiguous()
    out: dict[str, Any] = {"arcs": arcs}
    if aux is not None:
        out["aux_labels"] = aux.to(torch.int32)
    all_graph = torch.cat([graph, lattice.final_graph])
    if lattice.meta.get("k2_lm_scores", True) or bool(all_graph.any()):
        out["lm_scores"] = graph[perm].to(torch.float32)
    for name, values in extra.items():
        if name.startswith("k2_") and name[3:] not in out and name != "k2_labels" and isinstance(values, Tensor):
            values = values.cpu()
            out[name[3:]] = torch.cat([values, values.new_zeros((added, *values.shape[1:]))])[perm]
    for name, value in lattice.meta.get("k2_attributes", {}).items():
        out.setdefault(name, value)
    return out


def _renumber(lattice: Lattice, src: Tensor, dst: Tensor, final: int, n: int) -> tuple[Tensor, Tensor]:
    """``src``/``dst`` renumbered as k2 wants: the start state 0, the final state ``n - 1``, and
    every arc from a lower to a higher id (k2's "top-sorted" property, which its shortest-path
    and intersection algorithms assume). The other states keep their order when that is already
    topological, else they are sorted by level."""
    order = torch.tensor([lattice.start] + [s for s in range(n) if s not in (lattice.start, final)] + [final])
    new_id = torch.empty(n, dtype=torch.int64)
    new_id[order] = torch.arange(n)
    if bool((new_id[src] >= new_id[dst]).any()):  # ids not in a topological order: sort by level
        depth = torch.cat([lattice.levels.cpu(), torch.tensor([n])])[:n]  # a super-final state n - 1 goes last
        depth[final] = n
        new_id[torch.argsort(depth, stable=True)] = torch.arange(n)
    return new_id[src], new_id[dst]


def k2_dict_from_json(obj: Any, source: str | None = None) -> dict[str, Any]:
    """The k2 dict of a JSON object (how HTTP clients send k2 lattices; nothing is unpickled).

    JSON form: ``{"arcs": [[src, dst, label, score], ...], "aux_labels": [...],
    "lm_scores": [...], "<name>": [per-arc numbers] or a plain value}`` with ``score`` a float (not
    its bit pattern). Returns the ``as_dict()`` layout :func:`read_k2` takes.
    """
    if not isinstance(obj, Mapping):
        raise LatticeFormatError(f"a k2 lattice must be a JSON object, got {type(obj).__name__}", source=source)
    arcs = obj.get("arcs")
    if not isinstance(arcs, list) or not all(isinstance(a, list) and len(a) == 4 for a in arcs):
        raise LatticeFormatError("must be a list of [src, dst, label, score]", source=source, field="arcs")
    try:
        ints = torch.tensor([a[:3] for a in arcs], dtype=torch.int64).reshape(-1, 3)
        scores = torch.tensor([float(a[3]) for a in arcs], dtype=torch.float32)
    except (TypeError, ValueError, OverflowError, RuntimeError) as err:
        raise LatticeFormatError(f"bad number: {err}", source=source, field="arcs") from None
    if ints.numel() and (int(ints.min()) < -(1 << 31) or int(ints.max()) >= 1 << 31):
        raise LatticeFormatError("values must fit in int32", source=source, field="arcs")
    out: dict[str, Any] = {"arcs": torch.cat([ints.to(torch.int32), scores.view(torch.int32).unsqueeze(1)], dim=1)}
    for name, value in obj.items():
        if name == "arcs":
            continue
        if isinstance(value, list):
            dtype = torch.int32 if name in ("aux_labels",) or name.endswith("labels") else torch.float32
            try:
                out[name] = torch.tensor(value, dtype=dtype)
            except (TypeError, ValueError, OverflowError, RuntimeError) as err:
                raise LatticeFormatError(f"bad values: {err}", source=source, field=name) from None
        elif isinstance(value, _PLAIN):
            out[name] = value
        else:
            raise LatticeFormatError(f"unsupported value of type {type(value).__name__}", source=source, field=name)
    return out


def is_k2_json(obj: Any) -> bool:
    """Whether a parsed JSON value looks like the k2 JSON form (see :func:`k2_dict_from_json`), or a
    list whose first item does: an object with ``arcs`` of ``[src, dst, label, score]`` rows and
    none of the JSON lattice form's ``finals`` and ``start`` (whose arcs have 5 entries). Used to
    resolve format ``"auto"``; only the first arc is looked at, the reader checks the rest."""
    first = obj[0] if isinstance(obj, list) and obj else obj
    if not isinstance(first, Mapping) or "finals" in first or "start" in first:
        return False
    arcs = first.get("arcs")
    return isinstance(arcs, list) and (not arcs or (isinstance(arcs[0], list) and len(arcs[0]) == 4))


def k2_dict_to_json(d: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON form (see :func:`k2_dict_from_json`) of one k2 dict from :func:`write_k2`."""
    arcs = d["arcs"]
    out: dict[str, Any] = {"arcs": [[int(s), int(t), int(label), float(score)] for (s, t, label), score in
                                    zip(arcs[:, :3].tolist(), arcs[:, 3].contiguous().view(torch.float32).tolist())]}
    for name, value in d.items():
        if name != "arcs":
            out[name] = value.tolist() if isinstance(value, Tensor) else value
    return out
