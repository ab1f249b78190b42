"""What each stage of rescoring costs, beside the bound it is measured against (issue 40, item 3).

On the first ``--limit`` PocketSphinx dev lattices (``runs/pocketsphinx/dev_clean/lattices/*.slf``,
real decoder lattices of ~13k links: ``bench.pocketsphinx_set``), with ``models/librispeech``, in
one process on one thread, every number a ratio to its bound measured in the same run:

1. **Reader**: :func:`lattices.formats.pocketsphinx.read_pocketsphinx` on each file's text (already
   in memory), in MB/s, against (a) :func:`tokenise_bound`, the least any reader must do on the
   same bytes (the link block's numbers by ``str.translate`` + ``np.fromstring``, the nodes' times
   and words by two regular expressions), with ``text.split()`` beside it, and (b) reading the
   file's bytes (from the page cache: the files were just read). Whether the bound's arrays are
   bit for bit the reader's (src, dst, acoustic, posterior) is checked on every file.
2. **Determinization**: :func:`lattices.determinize.determinize` (epsilon removal included) timed
   on each lattice exactly as rescoring calls it (``model.rescore``: pruned, beam 10, a state cap,
   two score components), against OpenFst's (``kaldifst``: ``RmEpsilon`` + ``Determinize`` with a
   weight threshold of the same beam) on the scalar tropical acceptor of the same lattice (word
   labels, skipped symbols as epsilon, cost ``-w . x`` under the same ordering weights).
   ``kaldifst`` has no two-component (Kaldi ``LatticeWeight``) determinization, and OpenFst's
   weights are float32, so no exactly-alike run of the call itself exists; the like-for-like check
   determinizes *one* automaton in both: the scalar acceptor with its costs rounded to a grid of
   ``2^-k`` (:func:`on_grid`), on which every path sum is exact in float32 and float64. Exact
   (up to ``--exact-max-states`` of ours), both must give the same minimal automaton (states,
   arcs) and best path (cost, words). Pruned, both must give the best path; OpenFst keeps the
   exact determinization's arcs on a path within the beam, which ours gives too once its exact
   result is pruned so (:func:`arc_pruned_minimal`: the same minimal automaton is checked), while
   ours pruned on the fly keeps another automaton by design (every sequence within the beam with
   its best score, more states, far fewer paths outside the beam: ``lattices.determinize``).
3. **LM scoring**: the neural part's arithmetic for these lattices (counted by wrapping the
   model's calls: cell steps, output-layer rows, tail-cluster contexts), as FLOPs of the GRU and
   the adaptive-softmax output layer (:func:`lm_flops`), against ``torch.nn.functional.linear``
   of the same shapes measured in the same run (:func:`linear_gflops`): measured seconds, the
   seconds those FLOPs take at that rate, the ratio; and beside it a bound that adds the output
   layer's log-sum-exp over the same logits (:func:`linear_logsumexp_seconds`), which no FLOP
   count of the matmuls holds.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 10 .venv/bin/python -m bench.stage_bounds --limit 30

``kaldifst`` is a bench-only dependency (``.venv/bin/pip install kaldifst``); without it the
OpenFst columns are skipped with a note. Results: ``bench/results/stage_bounds.json``.
"""

from __future__ import annotations

import os

if __name__ == "__main__":  # one thread, set before numpy and torch load (not when imported, by the tests)
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

import argparse
import contextlib
import math
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F

from bench.common import REPO_ROOT, RESULTS, command_line, environment, shown, write_json

T = TypeVar("T")

#: the characters blanked in a link block before ``np.fromstring`` (the field names ``J= S= E= a= p=``
#: and the tabs): what is left is five numbers per link
LINK_NAMES = str.maketrans({c: " " for c in "JSEap=\t"})
#: the most bits of a grid step ``2^-k`` (:func:`grid_bits`)
MAX_GRID_BITS = 10
#: OpenFst's comparison delta on the grid: a quarter of the finest step, so that two grid values
#: are never "approximately equal" and every grid value quantizes to itself
GRID_DELTA_FRACTION = 0.25
#: how far OpenFst's float32 best-path cost may lie from ours (float64) on the unrounded acceptor
FLOAT32_TOLERANCE = 1e-3


# ------------------------------------------------------------------------------------ timing
def best_of(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    """The least wall seconds of ``repeat`` calls of ``fn`` (at least one) and the last result."""
    best, result = math.inf, None
    for _ in range(max(1, repeat)):
        tick = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - tick)
    return best, result  # type: ignore[return-value]


def rate(nbytes: int, seconds: float) -> float | None:
    """MB/s (10^6 bytes), None for no time."""
    return nbytes / seconds / 1e6 if seconds > 0 else None


def ratio(value: float, bound: float) -> float | None:
    """``value / bound`` (how many times its bound a stage takes), None without a bound."""
    return value / bound if bound > 0 else None


# ------------------------------------------------------------------------------------ 1. reader
def link_block(text: str) -> str:
    """The link lines of a PocketSphinx lattice: from the first ``J=`` line to the end."""
    start = text.find("\nJ=")
    return "" if start < 0 else text[start + 1:]


def node_block(text: str) -> str:
    """The node lines of a PocketSphinx lattice: from the first ``I=`` line to the first ``J=`` line."""
    start, end = text.find("\nI="), text.find("\nJ=")
    return "" if start < 0 else text[start + 1:end if end >= 0 else len(text)]


def parse_links(text: str) -> dict[str, np.ndarray]:
    """The link columns of a lattice as ``ps_lattice_write_htk`` writes them (``J= S= E= a= p=``
    in that order on every line) by the least work: the field names blanked by ``str.translate``,
    every number parsed by ``np.fromstring``. Returns int64 ``(L,)`` ``src``, ``dst`` and float64
    ``(L,)`` ``acoustic``, ``posterior``. Raises ``ValueError`` if the block is not five numbers a link."""
    values = np.fromstring(link_block(text).translate(LINK_NAMES), dtype=np.float64, sep=" ")
    if values.size % 5:
        raise ValueError(f"the link block holds {values.size} numbers, not five per link")
    columns = values.reshape(-1, 5)
    return {"src": columns[:, 1].astype(np.int64), "dst": columns[:, 2].astype(np.int64),
            "acoustic": np.ascontiguousarray(columns[:, 3]), "posterior": np.ascontiguousarray(columns[:, 4])}


def parse_nodes(text: str) -> tuple[np.ndarray, list[str]]:
    """The node times, float64 ``(N,)``, and words of a lattice, by two regular expressions."""
    block = node_block(text)
    return np.array(re.findall(r"\tt=(\S+)", block), dtype=np.float64), re.findall(r"\tW=(\S+)", block)


def tokenise_bound(text: str) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, list[str]]]:
    """Bound (a) of the reader: what any reader of the file must do, :func:`parse_links` and
    :func:`parse_nodes`, and nothing else (no checks, no lattice)."""
    return parse_links(text), parse_nodes(text)


def reader_arrays(lattice: Any, links: int) -> dict[str, np.ndarray]:
    """The first ``links`` arcs of what :func:`read_pocketsphinx` made (arc id = link id; an arc it
    adds for a real final word comes after them): ``src``, ``dst``, ``acoustic``, ``posterior``."""
    return {"src": lattice.src[:links].numpy(), "dst": lattice.dst[:links].numpy(),
            "acoustic": lattice.acoustic[:links].numpy(),
            "posterior": lattice.arc_extra["ps_posterior"][:links].numpy()}


def bit_equal(ours: Mapping[str, np.ndarray], theirs: Mapping[str, np.ndarray]) -> dict[str, bool]:
    """Per column: ``np.array_equal`` of the values and of their bit patterns (dtype included)."""
    out = {}
    for name, a in ours.items():
        b = theirs[name]
        out[name] = bool(a.dtype == b.dtype and np.array_equal(a, b)
                         and np.array_equal(a.view(np.int64), b.view(np.int64)))
    return out


def measure_reader(files: Sequence[Path], repeat: int) -> dict[str, Any]:
    """Stage 1 on ``files``: the reader, its two bounds and ``text.split()``, per file and in all."""
    from lattices.formats.pocketsphinx import read_pocketsphinx

    rows, equal_all = [], {"src": True, "dst": True, "acoustic": True, "posterior": True}
    sums = {"bytes": 0, "reader": 0.0, "tokenise": 0.0, "split": 0.0, "disk_read": 0.0}
    for path in files:
        disk, raw = best_of(path.read_bytes, repeat)
        text = raw.decode("utf-8")
        seconds, lattice = best_of(lambda: read_pocketsphinx(text, str(path)), repeat)
        bound, (links, _) = best_of(lambda: tokenise_bound(text), repeat)
        split, _ = best_of(text.split, repeat)
        compared: dict[str, bool] | str
        if "ps_trimmed_states" in lattice.meta:
            compared = "not compared: the reader trimmed states"
        else:
            compared = bit_equal(reader_arrays(lattice, len(links["src"])), links)
            equal_all = {k: v and compared[k] for k, v in equal_all.items()}
        rows.append({"file": path.name, "bytes": len(raw), "links": len(links["src"]), "reader_s": seconds,
                     "tokenise_s": bound, "split_s": split, "disk_read_s": disk, "bit_equal": compared})
        for key, value in (("bytes", len(raw)), ("reader", seconds), ("tokenise", bound), ("split", split),
                           ("disk_read", disk)):
            sums[key] += value
    total = int(sums["bytes"])

    def entry(name: str) -> dict[str, Any]:
        return {"seconds": round(sums[name], 4), "mb_per_s": _round(rate(total, sums[name]), 1),
                "reader_ratio": _round(ratio(sums["reader"], sums[name]), 2)}

    return {"files": len(files), "bytes": total, "links": sum(r["links"] for r in rows),
            "reader": {"seconds": round(sums["reader"], 4), "mb_per_s": _round(rate(total, sums["reader"]), 1)},
            "bounds": {"tokenise": entry("tokenise"), "split": entry("split"), "disk_read": entry("disk_read")},
            "bound_arrays_bit_equal_to_reader": equal_all,
            "per_file": [{**r, **{k: round(v, 5) for k, v in r.items() if k.endswith("_s")}} for r in rows]}


# ------------------------------------------------------------------------------ 2. determinization
@dataclass(frozen=True)
class Acceptor:
    """A weighted acyclic acceptor in the tropical semiring (``S`` states, ``A`` arcs, ``F`` finals).

    src, dst, label: int64 ``(A,)`` (label 0 is epsilon); cost: float64 ``(A,)`` (lower is
    better, ``-w . x``); finals: int64 ``(F,)``; final_cost: float64 ``(F,)``."""

    num_states: int
    start: int
    src: np.ndarray
    dst: np.ndarray
    label: np.ndarray
    cost: np.ndarray
    finals: np.ndarray
    final_cost: np.ndarray


def scalar_acceptor(lattice: Any, weights: Any, skip: Sequence[str] | frozenset[str]) -> Acceptor:
    """The acceptor :func:`lattices.determinize.determinize` sees, in one scalar weight: word
    labels with ``skip`` symbols (and 0, disambiguation symbols) as epsilon, as it removes them,
    and cost ``-(x . w)`` for the score components ``x`` ``(A, C)`` under the ordering ``weights``."""
    from lattices.determinize import ordering_vector, score_components, skipped_symbol_ids

    names, x, fx = score_components(lattice)
    w = ordering_vector(weights, names)
    words = lattice.words.cpu().numpy().astype(np.int64)
    words = np.where(np.isin(words, skipped_symbol_ids(lattice.symbols, np.unique(words).tolist(), skip)), 0, words)
    return Acceptor(lattice.num_states, lattice.start, lattice.src.cpu().numpy().astype(np.int64),
                    lattice.dst.cpu().numpy().astype(np.int64), words, -(x @ w), lattice.finals.cpu().numpy(),
                    -(fx @ w))


def grid_bits(acc: Acceptor, most: int = MAX_GRID_BITS) -> int:
    """The bits ``k`` of a grid ``2^-k`` on which every path sum of ``acc`` (at most its longest
    path's arcs times the largest cost, plus the largest final cost) stays below ``2^23`` steps,
    so that it is exact in float32 (24-bit significand) and in float64; at most ``most``."""
    from lattices import topology

    if not len(acc.src):
        return most
    levels = topology.longest_path_levels(acc.num_states, acc.src, acc.dst)
    bound = int(levels.max()) * float(np.abs(acc.cost).max()) + float(np.abs(acc.final_cost).max(initial=0.0))
    return min(most, 23 - math.ceil(math.log2(bound + 1.0)))


def on_grid(acc: Acceptor, bits: int) -> Acceptor:
    """``acc`` with every cost rounded to the nearest multiple of ``2^-bits``."""
    step = 2.0 ** -bits
    return Acceptor(acc.num_states, acc.start, acc.src, acc.dst, acc.label, np.rint(acc.cost / step) * step,
                    acc.finals, np.rint(acc.final_cost / step) * step)


def acceptor_lattice(template: Any, acc: Acceptor) -> Any:
    """``acc`` as a lattice (``template``'s key and symbols) with one named score ``first_pass`` =
    ``-cost``, so that our determinizer runs in the scalar tropical semiring (one component)."""
    return template.replace(words=torch.from_numpy(acc.label), scores={"first_pass": torch.from_numpy(-acc.cost)},
                            final_scores={"first_pass": torch.from_numpy(-acc.final_cost)}, arc_extra={},
                            state_extra={})


def to_openfst(acc: Acceptor) -> Any:
    """``acc`` as a ``kaldifst.StdVectorFst`` (float32 tropical weights: the costs as they are)."""
    import kaldifst

    fst = kaldifst.StdVectorFst()
    for _ in range(acc.num_states):
        fst.add_state()
    fst.start = int(acc.start)
    arc = kaldifst.StdArc
    for s, d, label, cost in zip(acc.src.tolist(), acc.dst.tolist(), acc.label.tolist(), acc.cost.tolist()):
        fst.add_arc(s, arc(label, label, cost, d))
    for s, cost in zip(acc.finals.tolist(), acc.final_cost.tolist()):
        fst.set_final(s, cost)
    return fst


def openfst_determinize(fst: Any, beam: float | None, delta: float | None = None) -> Any:
    """OpenFst's ``RmEpsilon`` (on a copy) then ``Determinize``, pruned to ``beam`` (a weight
    threshold: OpenFst's pruned determinization) or exact (None); ``delta``: the comparison and
    quantization delta (None: OpenFst's default, ``kDelta`` = 2^-10)."""
    import kaldifst

    work = fst.copy()
    kaldifst.rmepsilon(work)
    options: dict[str, Any] = {"weight": "" if beam is None else repr(float(beam))}
    if delta is not None:
        options["delta"] = delta
    return kaldifst.determinize(work, **options)


def openfst_summary(fst: Any, delta: float | None = None) -> dict[str, Any]:
    """States and arcs of a determinized ``fst``, of its minimization (on a copy), and its best
    path: cost (float) and labels."""
    import kaldifst

    minimal = fst.copy()
    kaldifst.minimize(minimal, **({} if delta is None else {"delta": delta}))
    _, labels, _, weight = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(fst))
    return {"states": fst.num_states, "arcs": _fst_arcs(fst), "min_states": minimal.num_states,
            "min_arcs": _fst_arcs(minimal), "best_cost": float(weight.value),
            "best_words": [int(label) for label in labels if label != 0]}


def _fst_arcs(fst: Any) -> int:
    return sum(fst.num_arcs(state) for state in range(fst.num_states))


def our_summary(lattice: Any, weights: Any = (1.0,)) -> dict[str, Any]:
    """:func:`openfst_summary` of one of our determinized lattices: its states and arcs, those of
    its minimization, and its best path under the ordering ``weights`` (default: a one-component
    lattice's own score), its cost (minus the score) and words."""
    from lattices.determinize import ordering_vector, score_components
    from lattices.minimize import minimize
    from lattices.search import Dag

    minimal = minimize(lattice)
    names, x, fx = score_components(lattice)
    w = ordering_vector(weights, names)
    best, arcs = Dag(lattice.num_states, lattice.start, lattice.src, lattice.dst, torch.from_numpy(x @ w),
                     lattice.finals, torch.from_numpy(fx @ w), lattice.levels).best_path()
    words = lattice.words[arcs].tolist()
    return {"states": lattice.num_states, "arcs": lattice.num_arcs, "min_states": minimal.num_states,
            "min_arcs": minimal.num_arcs, "best_cost": -float(best), "best_words": [w for w in words if w != 0]}


def agreement(ours: Mapping[str, Any], theirs: Mapping[str, Any], tolerance: float) -> dict[str, bool]:
    """Which of :func:`our_summary` and :func:`openfst_summary` agree: the minimal automaton's
    states and arcs, the best cost (within ``tolerance``) and the best path's words."""
    return {"min_states": ours["min_states"] == theirs["min_states"],
            "min_arcs": ours["min_arcs"] == theirs["min_arcs"],
            "best_cost": abs(ours["best_cost"] - theirs["best_cost"]) <= tolerance,
            "best_words": ours["best_words"] == theirs["best_words"]}


@dataclass
class DeterminizeCall:
    """One call rescoring made: its lattice, ordering weights and keyword arguments, its seconds
    and what it gave (states and arcs; ``stopped``: the state cap ended it with a partial result)."""

    lattice: Any
    weights: Any
    options: dict[str, Any]
    seconds: float
    states: int | None = None
    arcs: int | None = None
    stopped: bool = False


@contextlib.contextmanager
def recording_determinize(calls: list[DeterminizeCall]) -> Iterator[None]:
    """Within the block, every :func:`lattices.determinize.determinize` call of the rescoring
    engine (``lattices.reduce`` calls it) is timed and kept in ``calls``."""
    import lattices.reduce as reduce
    from lattices.determinize import DeterminizationTooLarge

    original = reduce.determinize

    def timed(lattice: Any, weights: Any, **options: Any) -> Any:
        call = DeterminizeCall(lattice, dict(weights) if isinstance(weights, Mapping) else weights,
                               {k: v for k, v in options.items() if k != "report"}, 0.0)
        calls.append(call)
        tick = time.perf_counter()
        try:
            out = original(lattice, weights, **options)
        except DeterminizationTooLarge as err:
            call.seconds, call.stopped = time.perf_counter() - tick, True
            if err.partial is not None:
                call.states, call.arcs = err.partial.num_states, err.partial.num_arcs
            raise
        call.seconds, call.states, call.arcs = time.perf_counter() - tick, out.num_states, out.num_arcs
        return out

    with mock.patch.object(reduce, "determinize", timed):
        yield


def compare_determinization(call: DeterminizeCall, repeat: int, exact_max_states: int,
                            openfst: bool) -> dict[str, Any]:
    """Stage 2 on one recorded call: ours again as called (least of ``repeat``), OpenFst pruned on
    the float scalar acceptor, and the like-for-like pair on the grid acceptor (pruned and exact)."""
    from lattices.determinize import DeterminizationTooLarge, determinize

    lattice, beam, skip = call.lattice, call.options.get("beam"), call.options.get("skip", ())

    def as_called() -> Any:
        try:
            return determinize(lattice, call.weights, **call.options)
        except DeterminizationTooLarge as err:
            return err.partial

    again, ours = best_of(as_called, repeat)
    row: dict[str, Any] = {"key": lattice.key, "states": lattice.num_states, "arcs": lattice.num_arcs,
                           "beam": beam, "max_states": call.options.get("max_states"),
                           "ours_as_called": {"seconds_in_rescoring": round(call.seconds, 5),
                                              "seconds": round(again, 5), "stopped_at_cap": call.stopped,
                                              **our_summary(ours, call.weights)}}
    acc = scalar_acceptor(lattice, call.weights, skip)
    if openfst:
        fst = to_openfst(acc)
        seconds, det = best_of(lambda: openfst_determinize(fst, beam), repeat)
        row["openfst_pruned_float"] = {"seconds": round(seconds, 5), **openfst_summary(det)}
        row["ratio_ours_as_called_to_openfst"] = _round(ratio(again, seconds), 2)
        row["as_called_agrees_with_openfst"] = {
            k: v for k, v in agreement(row["ours_as_called"], row["openfst_pruned_float"], FLOAT32_TOLERANCE).items()
            if k.startswith("best")}
    bits = grid_bits(acc)
    grid = on_grid(acc, bits)
    row["grid_bits"] = bits
    one = acceptor_lattice(lattice, grid)
    grid_fst = to_openfst(grid) if openfst else None
    delta = GRID_DELTA_FRACTION * 2.0 ** -bits
    exact = None
    for mode, mode_beam in (("exact", None), ("pruned", beam)):
        if mode == "pruned" and mode_beam is None:
            continue
        cap = exact_max_states if mode_beam is None else None
        try:
            ours_s, ours_det = best_of(lambda: determinize(one, [1.0], beam=mode_beam, max_states=cap, skip=()),
                                       repeat)
        except DeterminizationTooLarge:
            row[f"grid_{mode}"] = {"skipped": f"ours passed {cap} states"}
            continue
        entry: dict[str, Any] = {"ours": {"seconds": round(ours_s, 5), **our_summary(ours_det)}}
        if mode == "exact":
            exact = ours_det
        elif exact is not None:  # the sequences within the beam: ours exact, then pruned as OpenFst prunes
            entry["ours_exact_then_arc_pruned"] = arc_pruned_minimal(exact, mode_beam)
        if grid_fst is not None:
            theirs_s, theirs_det = best_of(lambda: openfst_determinize(grid_fst, mode_beam, delta), repeat)
            entry["openfst"] = {"seconds": round(theirs_s, 5), **openfst_summary(theirs_det, delta)}
            agree = agreement(entry["ours"], entry["openfst"], 2.0 ** -bits / 2)
            if mode == "pruned":  # ours keeps another (larger) automaton by design: compare what both must hold
                agree = {k: agree[k] for k in ("best_cost", "best_words")}
                if "ours_exact_then_arc_pruned" in entry:
                    pruned = entry["ours_exact_then_arc_pruned"]
                    agree["arc_pruned_min_states"] = pruned["min_states"] == entry["openfst"]["min_states"]
                    agree["arc_pruned_min_arcs"] = pruned["min_arcs"] == entry["openfst"]["min_arcs"]
            entry["agree"] = agree
            entry["ratio_ours_to_openfst"] = _round(ratio(ours_s, theirs_s), 2)
        row[f"grid_{mode}"] = entry
    return row


def arc_pruned_minimal(lattice: Any, beam: float) -> dict[str, int]:
    """States and arcs of a one-component determinized ``lattice`` once the arcs on no path within
    ``beam`` of the best are dropped (:func:`lattices.reduce.prune`: what OpenFst's ``Prune``
    keeps after its pruned determinization), and of its minimization."""
    from lattices.minimize import minimize
    from lattices.reduce import prune

    pruned, _ = prune(lattice, beam, 1.0, 0.0, skip=(), score_weights=(("first_pass", 1.0),))
    minimal = minimize(pruned)
    return {"states": pruned.num_states, "arcs": pruned.num_arcs, "min_states": minimal.num_states,
            "min_arcs": minimal.num_arcs}


def summarise_determinization(rows: list[dict[str, Any]], openfst: bool) -> dict[str, Any]:
    """Totals of :func:`compare_determinization` rows: seconds, ratios, agreement counts and the
    lattices where OpenFst and ours disagree."""
    out: dict[str, Any] = {"lattices": len(rows),
                           "ours_as_called_seconds_in_rescoring": round(sum(r["ours_as_called"]["seconds_in_rescoring"]
                                                                            for r in rows), 4),
                           "ours_as_called_seconds": round(sum(r["ours_as_called"]["seconds"] for r in rows), 4),
                           "stopped_at_cap": sum(r["ours_as_called"]["stopped_at_cap"] for r in rows)}
    if not openfst:
        return out
    theirs = sum(r["openfst_pruned_float"]["seconds"] for r in rows)
    out["openfst_pruned_float_seconds"] = round(theirs, 4)
    out["ratio_ours_as_called_to_openfst"] = _round(ratio(out["ours_as_called_seconds"], theirs), 2)
    out["as_called_best_path_agrees"] = agree_counts([r["as_called_agrees_with_openfst"] for r in rows])
    out["as_called_best_cost_max_abs_diff"] = max(
        (abs(r["ours_as_called"]["best_cost"] - r["openfst_pruned_float"]["best_cost"]) for r in rows), default=None)
    out["as_called_min_states_ours_vs_openfst"] = [sum(r["ours_as_called"]["min_states"] for r in rows),
                                                   sum(r["openfst_pruned_float"]["min_states"] for r in rows)]
    for mode in ("pruned", "exact"):
        done = [r for r in rows if "agree" in r.get(f"grid_{mode}", {})]
        ours_s = sum(r[f"grid_{mode}"]["ours"]["seconds"] for r in done)
        theirs_s = sum(r[f"grid_{mode}"]["openfst"]["seconds"] for r in done)
        out[f"grid_{mode}"] = {
            "lattices": len(done), "skipped": len(rows) - len(done), "ours_seconds": round(ours_s, 4),
            "openfst_seconds": round(theirs_s, 4), "ratio_ours_to_openfst": _round(ratio(ours_s, theirs_s), 2),
            "agree": agree_counts([r[f"grid_{mode}"]["agree"] for r in done]),
            "ours_states_arcs": [sum(r[f"grid_{mode}"]["ours"][k] for r in done) for k in ("states", "arcs")],
            "openfst_states_arcs": [sum(r[f"grid_{mode}"]["openfst"][k] for r in done) for k in ("states", "arcs")],
            "disagree": [disagreement(r["key"], r[f"grid_{mode}"]) for r in done
                         if not all(r[f"grid_{mode}"]["agree"].values())]}
    return out


def agree_counts(checks: Sequence[Mapping[str, bool]]) -> dict[str, list[int]]:
    """Per check name: ``[lattices that agree, lattices checked]`` (a lattice may lack a check:
    the pruned comparison of a lattice whose exact determinization was skipped)."""
    names = dict.fromkeys(name for check in checks for name in check)
    return {name: [sum(bool(c.get(name)) for c in checks), sum(name in c for c in checks)] for name in names}


def disagreement(key: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """What a like-for-like ``entry`` of :func:`compare_determinization` disagrees on: ``[ours,
    OpenFst]`` for each failed count or cost, ``"differ"`` for the best path's words."""
    ours = {**entry["ours"], **{f"arc_pruned_{k}": v for k, v in entry.get("ours_exact_then_arc_pruned", {}).items()}}
    theirs = {**entry["openfst"], **{f"arc_pruned_{k}": v for k, v in entry["openfst"].items()}}
    out: dict[str, Any] = {"key": key}
    for name, ok in entry["agree"].items():
        if not ok:
            out[name] = "differ" if name == "best_words" else [ours[name], theirs[name]]
    return out


# ---------------------------------------------------------------------------------- 3. LM scoring
@dataclass
class LMCounts:
    """What the neural LM computed while rescoring: calls and seconds of ``score`` (the whole
    neural scoring), of ``context_features`` (the recurrence) and of the adaptive output layer;
    ``contexts``, ``targets``: rows and targets given to ``score``; ``cell_rows`` ``project_rows``:
    rows through the cell's recurrent and input matmuls; ``head_rows``: contexts through the head;
    ``tail_contexts``, ``tail_targets``: per tail cluster, the distinct contexts through it and
    the targets in it; ``*_calls``: how many calls those rows came in."""

    score_calls: int = 0
    score_seconds: float = 0.0
    features_seconds: float = 0.0
    output_seconds: float = 0.0
    contexts: int = 0
    targets: int = 0
    cell_rows: int = 0
    cell_calls: int = 0
    project_rows: int = 0
    project_calls: int = 0
    head_rows: int = 0
    head_calls: int = 0
    tail_contexts: list[int] = field(default_factory=list)
    tail_targets: list[int] = field(default_factory=list)
    tail_calls: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class LMShapes:
    """The matmul shapes of a recurrent LM with an adaptive softmax: ``input`` (embedding ->
    input gates), ``recurrent`` (state -> recurrent gates), ``head`` (features -> shortlist and
    cluster entries) as ``(in, out)``; ``tails``: per cluster ``(features, projection, cluster size)``."""

    input: tuple[int, int]
    recurrent: tuple[int, int]
    head: tuple[int, int]
    tails: tuple[tuple[int, int, int], ...]


def lm_shapes(model: Any) -> LMShapes:
    """:class:`LMShapes` of a :class:`lm.model.RecurrentLM` with a gated cell (``input_weights``,
    ``recurrent_weights``) and an adaptive softmax."""
    cell, adaptive = model.cell, model.adaptive
    if adaptive is None or not hasattr(cell, "recurrent_weights"):
        raise ValueError("the FLOP count knows a recurrent cell with input_weights/recurrent_weights and an "
                         "adaptive softmax only")
    tails = tuple((t[0].in_features, t[0].out_features, t[1].out_features) for t in adaptive.tail)
    return LMShapes((cell.input_weights.in_features, cell.input_weights.out_features),
                    (cell.recurrent_weights.in_features, cell.recurrent_weights.out_features),
                    (adaptive.head.in_features, adaptive.head.out_features), tails)


def linear_flops(rows: int, in_features: int, out_features: int) -> int:
    """FLOPs of ``rows`` rows through an ``in -> out`` linear layer: a multiply and an add per
    weight, ``2 * rows * in * out`` (the bias and the elementwise work, ``O(out)`` a row against
    ``O(in * out)``, are not counted)."""
    return 2 * rows * in_features * out_features


def lm_flops(counts: LMCounts, shapes: LMShapes) -> dict[str, int]:
    """The matmul FLOPs of :class:`LMCounts` (:func:`linear_flops`): ``recurrent`` (cell rows
    through the state -> gates matmul), ``input`` (projected rows through embedding -> gates),
    ``head`` (every context through the head), ``tail<i>`` (each cluster's distinct contexts
    through its projection and its output matrix), ``targets`` (the picked logits: a dot product
    of the features, or the cluster's projection, with the target's row, for every target),
    ``cell`` and ``output`` (the sums), ``total``."""
    out = {"recurrent": linear_flops(counts.cell_rows, *shapes.recurrent),
           "input": linear_flops(counts.project_rows, *shapes.input),
           "head": linear_flops(counts.head_rows, *shapes.head)}
    picked = linear_flops(counts.targets, shapes.head[0], 1)
    for i, (features, projection, size) in enumerate(shapes.tails):
        contexts = counts.tail_contexts[i] if i < len(counts.tail_contexts) else 0
        targets = counts.tail_targets[i] if i < len(counts.tail_targets) else 0
        out[f"tail{i}"] = linear_flops(contexts, features, projection) + linear_flops(contexts, projection, size)
        picked += linear_flops(targets, projection, 1)
    out["targets"] = picked
    out["cell"] = out["recurrent"] + out["input"]
    out["output"] = out["head"] + sum(out[f"tail{i}"] for i in range(len(shapes.tails))) + picked
    out["total"] = out["cell"] + out["output"]
    return out


@contextlib.contextmanager
def counting_lm(model: Any, counts: LMCounts) -> Iterator[None]:
    """Within the block, ``model`` (a :class:`lm.model.RecurrentLM` with an adaptive softmax)
    counts its scoring work into ``counts`` (:class:`LMCounts`), its methods wrapped on the
    instance: ``score_contexts``, ``context_features``, ``_adaptive_pick``, the cell's ``step``
    and ``project``."""
    score_contexts, context_features = model.score_contexts, model.context_features
    adaptive_pick, step, project = model._adaptive_pick, model.cell.step, model.cell.project
    lows = [lo for lo, _ in model._clusters()]
    counts.tail_contexts, counts.tail_targets, counts.tail_calls = [0] * len(lows), [0] * len(lows), [0] * len(lows)

    def scored(contexts: torch.Tensor, lengths: torch.Tensor, targets: torch.Tensor, *args: Any, **kw: Any) -> Any:
        tick = time.perf_counter()
        out = score_contexts(contexts, lengths, targets, *args, **kw)
        counts.score_seconds += time.perf_counter() - tick
        counts.score_calls += 1
        counts.contexts += int(contexts.shape[0])
        counts.targets += int(targets.shape[0])
        return out

    def featured(*args: Any, **kw: Any) -> Any:
        tick = time.perf_counter()
        out = context_features(*args, **kw)
        counts.features_seconds += time.perf_counter() - tick
        return out

    def picked(features: torch.Tensor, rows: torch.Tensor, targets: torch.Tensor, *args: Any, **kw: Any) -> Any:
        tick = time.perf_counter()
        out = adaptive_pick(features, rows, targets, *args, **kw)
        counts.output_seconds += time.perf_counter() - tick
        counts.head_rows += int(features.shape[0])
        counts.head_calls += 1
        cluster = torch.bucketize(targets, torch.tensor(lows, device=targets.device), right=True) - 1
        for i in range(len(lows)):
            wanted = cluster == i
            if bool(wanted.any()):
                counts.tail_contexts[i] += int(torch.unique(rows[wanted]).numel())
                counts.tail_targets[i] += int(wanted.sum())
                counts.tail_calls[i] += 1
        return out

    def stepped(state: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        counts.cell_rows += int(state.numel() // state.shape[-1])
        counts.cell_calls += 1
        return step(state, u)

    def projected(x: torch.Tensor) -> torch.Tensor:
        counts.project_rows += int(x.numel() // x.shape[-1])
        counts.project_calls += 1
        return project(x)

    with contextlib.ExitStack() as stack:
        for owner, name, wrapper in ((model, "score_contexts", scored), (model, "context_features", featured),
                                     (model, "_adaptive_pick", picked), (model.cell, "step", stepped),
                                     (model.cell, "project", projected)):
            stack.enter_context(mock.patch.object(owner, name, wrapper))
        yield


@contextlib.contextmanager
def timing_calls(owner: Any, name: str, seconds: list[float]) -> Iterator[None]:
    """Within the block, every call of ``owner.name`` adds its wall seconds to ``seconds[0]``."""
    original = getattr(owner, name)

    def timed(*args: Any, **kw: Any) -> Any:
        tick = time.perf_counter()
        try:
            return original(*args, **kw)
        finally:
            seconds[0] += time.perf_counter() - tick

    with mock.patch.object(owner, name, timed):
        yield


def seconds_per_call(fn: Callable[[], Any], min_seconds: float, repeat: int = 3) -> float:
    """The least mean wall seconds of a call of ``fn`` over ``repeat`` timings, each of enough
    calls to fill about ``min_seconds`` (after one call to warm up)."""
    fn()
    tick, loops = time.perf_counter(), 0
    while loops < 2 or time.perf_counter() - tick < min_seconds / 4:
        fn()
        loops += 1
    loops = max(2, int(loops * min_seconds / max(time.perf_counter() - tick, 1e-9) / 4))
    best = math.inf
    for _ in range(repeat):
        tick = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, (time.perf_counter() - tick) / loops)
    return best


def _operands(rows: int, in_features: int, out_features: int,
              bias: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(max(1, int(rows)), in_features, generator=generator)
    weight = torch.randn(out_features, in_features, generator=generator) / math.sqrt(in_features)
    return x, weight, torch.randn(out_features, generator=generator) if bias else None


@torch.no_grad()
def linear_gflops(rows: int, in_features: int, out_features: int, bias: bool, min_seconds: float = 0.05) -> float:
    """GFLOP/s (:func:`linear_flops`) of ``torch.nn.functional.linear`` on float32 ``(rows, in)``
    by ``(out, in)`` on this CPU, now (:func:`seconds_per_call`)."""
    x, weight, b = _operands(rows, in_features, out_features, bias)
    return linear_flops(x.shape[0], in_features, out_features) / seconds_per_call(
        lambda: F.linear(x, weight, b), min_seconds) / 1e9


@torch.no_grad()
def linear_logsumexp_seconds(rows: int, in_features: int, out_features: int, bias: bool,
                             min_seconds: float = 0.05) -> float:
    """Seconds a row of ``F.linear`` followed by the row's log-sum-exp
    (:func:`lm.output.logsumexp_in_place`, as the fp32 output layer computes it), at ``rows`` rows a call."""
    from lm.output import logsumexp_in_place

    x, weight, b = _operands(rows, in_features, out_features, bias)
    return seconds_per_call(lambda: logsumexp_in_place(F.linear(x, weight, b)), min_seconds) / x.shape[0]


def lm_bound(counts: LMCounts, shapes: LMShapes, min_seconds: float) -> dict[str, Any]:
    """The FLOPs of :func:`lm_flops`, each part's ``F.linear`` rate at its mean rows a call
    (measured now), the seconds the FLOPs take at those rates, against the measured seconds."""
    flops = lm_flops(counts, shapes)

    def mean(rows: int, calls: int) -> int:
        return max(1, round(rows / calls)) if calls else 1

    parts: dict[str, dict[str, Any]] = {
        "recurrent": {"rows_per_call": mean(counts.cell_rows, counts.cell_calls), "shape": shapes.recurrent,
                      "bias": True},
        "input": {"rows_per_call": mean(counts.project_rows, counts.project_calls), "shape": shapes.input,
                  "bias": True},
        "head": {"rows_per_call": mean(counts.head_rows, counts.head_calls), "shape": shapes.head, "bias": True}}
    for i, (features, projection, size) in enumerate(shapes.tails):
        rows = mean(counts.tail_contexts[i], counts.tail_calls[i])
        parts[f"tail{i}_projection"] = {"rows_per_call": rows, "shape": (features, projection), "bias": False,
                                        "flops": linear_flops(counts.tail_contexts[i], features, projection)}
        parts[f"tail{i}_output"] = {"rows_per_call": rows, "shape": (projection, size), "bias": False,
                                    "flops": linear_flops(counts.tail_contexts[i], projection, size)}
    bound = {"cell": 0.0, "output": 0.0, "output_with_logsumexp": 0.0}
    for name, part in parts.items():
        part.setdefault("flops", flops.get(name, 0))
        part["gflops_per_s"] = round(linear_gflops(part["rows_per_call"], *part["shape"], part["bias"], min_seconds), 2)
        seconds = part["flops"] / (part["gflops_per_s"] * 1e9) if part["flops"] else 0.0
        cell = name in ("recurrent", "input")
        bound["cell" if cell else "output"] += seconds
        if name == "head" or name.endswith("_output"):  # the log-sum-exp over these logits, beside the matmul
            rows = counts.head_rows if name == "head" else counts.tail_contexts[int(name[4:name.index("_")])]
            with_lse = rows * linear_logsumexp_seconds(part["rows_per_call"], *part["shape"], part["bias"], min_seconds)
            part["with_logsumexp_s"] = round(with_lse, 5)
            bound["output_with_logsumexp"] += with_lse
        elif not cell:
            bound["output_with_logsumexp"] += seconds
        part["shape"] = list(part["shape"])
        part["bound_s"] = round(seconds, 5)
    peak = linear_gflops(2048, shapes.head[0], 2048, True, min_seconds)
    measured = {"score": counts.score_seconds, "cell": counts.features_seconds, "output": counts.output_seconds}
    total_bound = bound["cell"] + bound["output"]
    return {"counts": asdict(counts), "flops": flops, "gflop": round(flops["total"] / 1e9, 3), "parts": parts,
            "peak_linear_gflops_per_s": round(peak, 2),
            "measured_s": {k: round(v, 4) for k, v in measured.items()},
            "bound_s": {"cell": round(bound["cell"], 4), "output": round(bound["output"], 4),
                        "total": round(total_bound, 4),
                        "output_with_logsumexp": round(bound["output_with_logsumexp"], 4),
                        "total_with_logsumexp": round(bound["cell"] + bound["output_with_logsumexp"], 4)},
            "bound_at_peak_s": round(flops["total"] / (peak * 1e9), 4),
            "ratio": {"score": _round(ratio(counts.score_seconds, total_bound), 2),
                      "cell": _round(ratio(counts.features_seconds, bound["cell"]), 2),
                      "output": _round(ratio(counts.output_seconds, bound["output"]), 2),
                      "score_with_logsumexp": _round(ratio(counts.score_seconds,
                                                           bound["cell"] + bound["output_with_logsumexp"]), 2),
                      "output_with_logsumexp": _round(ratio(counts.output_seconds, bound["output_with_logsumexp"]),
                                                      2)},
            "achieved_gflops_per_s": _round(flops["total"] / counts.score_seconds / 1e9 if counts.score_seconds
                                            else None, 3)}


# ------------------------------------------------------------------------------------ the run
def lattices_of(set_dir: Path, limit: int | None) -> list[Path]:
    """The first ``limit`` lattices of a PocketSphinx set (sorted names); all with None."""
    files = sorted((set_dir / "lattices").glob("*.slf"))
    if not files:
        raise SystemExit(f"no lattices in {set_dir / 'lattices'}: build the set first "
                         "(python -m bench.pocketsphinx_set)")
    return files[:limit] if limit else files


def neural_part(scorer: Any) -> tuple[Any, Any]:
    """The :class:`lm.scorer.LMScorer` of a model's scorer (itself, or a mixture's part) and its
    :class:`lm.model.RecurrentLM`."""
    from lm.scorer import LMScorer

    for part in [scorer, *getattr(scorer, "scorers", ())]:
        if isinstance(part, LMScorer):
            return part, part.loaded.model
    raise SystemExit("the model has no neural part to count")


def kaldifst_available() -> tuple[bool, str | None]:
    """Whether ``kaldifst`` imports, and its version (or why not)."""
    try:
        import kaldifst
    except ImportError as err:
        return False, (f"kaldifst is not importable ({err}): the OpenFst columns are skipped "
                       "(.venv/bin/pip install kaldifst)")
    import importlib.metadata

    try:
        return True, importlib.metadata.version("kaldifst")
    except importlib.metadata.PackageNotFoundError:
        return True, getattr(kaldifst, "__version__", "unknown")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.stage_bounds", description=__doc__.split("\n")[0])
    parser.add_argument("--set", type=Path, default=REPO_ROOT / "runs" / "pocketsphinx" / "dev_clean")
    parser.add_argument("--model", type=Path, default=REPO_ROOT / "models" / "librispeech")
    parser.add_argument("--limit", type=int, default=30, help="the first N lattices of the set (default 30)")
    parser.add_argument("--repeat", type=int, default=3, help="timings taken as the least of this many runs")
    parser.add_argument("--exact-max-states", type=int, default=20_000,
                        help="the like-for-like exact determinization is skipped past this many of our states")
    parser.add_argument("--matmul-seconds", type=float, default=0.05, help="time filled by each F.linear rate")
    parser.add_argument("--out", type=Path, default=RESULTS / "stage_bounds.json")
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    files = lattices_of(args.set, args.limit)
    has_openfst, openfst_note = kaldifst_available()
    record: dict[str, Any] = {"command": command_line("bench.stage_bounds", argv), "set": shown(args.set),
                              "model": shown(args.model), "limit": args.limit, "lattices": len(files),
                              "repeat": args.repeat, "environment": environment(), "note": args.note,
                              "kaldifst": openfst_note if has_openfst else None}

    print(f"1/3 reader on {len(files)} lattices", file=sys.stderr)
    record["reader"] = measure_reader(files, args.repeat)

    print("2/3 rescoring (determinize calls and LM work recorded)", file=sys.stderr)
    import afp

    model = afp.load_model(args.model)
    lm_scorer, network = neural_part(model.scorer)
    model.rescore([str(files[0])])  # warm-up, not counted
    calls: list[DeterminizeCall] = []
    counts = LMCounts()
    others = [0.0]
    with contextlib.ExitStack() as stack:
        stack.enter_context(recording_determinize(calls))
        stack.enter_context(counting_lm(network, counts))
        for part in getattr(model.scorer, "scorers", ()):
            if part is not lm_scorer:
                stack.enter_context(timing_calls(part, "score", others))
        tick = time.perf_counter()
        results = model.rescore([str(f) for f in files])
        wall = time.perf_counter() - tick
    timing: dict[str, float] = {}
    for per_lattice in results:
        for name, value in per_lattice[0].seconds.items():
            timing[name] = timing.get(name, 0.0) + value
    record["rescore"] = {"seconds": round(wall, 3), "engine_timing_s": {k: round(v, 3) for k, v in timing.items()},
                         "neural_score_s": round(counts.score_seconds, 3), "other_parts_score_s": round(others[0], 3),
                         "determinize_calls": len(calls),
                         "determinize_s": round(sum(c.seconds for c in calls), 3)}

    print(f"   determinization: {len(calls)} calls against OpenFst", file=sys.stderr)
    rows = [compare_determinization(call, args.repeat, args.exact_max_states, has_openfst) for call in calls]
    record["determinize"] = {"summary": summarise_determinization(rows, has_openfst), "per_lattice": rows,
                             "not_determinized": len(files) - len(calls)}
    if not has_openfst:
        record["determinize"]["note"] = openfst_note

    print("3/3 LM arithmetic against F.linear", file=sys.stderr)
    record["lm"] = {"shapes": asdict(lm_shapes(network)), "precision": lm_scorer.precision,
                    **lm_bound(counts, lm_shapes(network), args.matmul_seconds)}
    record["summary"] = headline(record)
    write_json(args.out, record)
    print(format_summary(record["summary"]))
    print(f"wrote {shown(args.out)}", file=sys.stderr)
    return record


def headline(record: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers of the three stages side by side: measured, bound, ratio."""
    reader, det, lm = record["reader"], record["determinize"]["summary"], record["lm"]
    out: dict[str, Any] = {
        "reader": {"mb_per_s": reader["reader"]["mb_per_s"],
                   "tokenise_bound_mb_per_s": reader["bounds"]["tokenise"]["mb_per_s"],
                   "ratio_to_tokenise": reader["bounds"]["tokenise"]["reader_ratio"],
                   "disk_read_mb_per_s": reader["bounds"]["disk_read"]["mb_per_s"],
                   "ratio_to_disk_read": reader["bounds"]["disk_read"]["reader_ratio"],
                   "bound_bit_equal": reader["bound_arrays_bit_equal_to_reader"]},
        "determinize": {"ours_as_called_s": det["ours_as_called_seconds"],
                        "openfst_pruned_s": det.get("openfst_pruned_float_seconds"),
                        "ratio": det.get("ratio_ours_as_called_to_openfst"),
                        "best_path_agrees": det.get("as_called_best_path_agrees"),
                        "stopped_at_cap": det["stopped_at_cap"]},
        "lm": {"measured_s": lm["measured_s"]["score"], "flop_bound_s": lm["bound_s"]["total"],
               "ratio": lm["ratio"]["score"], "gflop": lm["gflop"],
               "cell": [lm["measured_s"]["cell"], lm["bound_s"]["cell"], lm["ratio"]["cell"]],
               "output": [lm["measured_s"]["output"], lm["bound_s"]["output"], lm["ratio"]["output"]],
               "with_logsumexp_bound_s": lm["bound_s"]["total_with_logsumexp"],
               "ratio_with_logsumexp": lm["ratio"]["score_with_logsumexp"]}}
    for mode in ("pruned", "exact"):
        if f"grid_{mode}" in det:
            grid = det[f"grid_{mode}"]
            out["determinize"][f"grid_{mode}"] = {"ours_s": grid["ours_seconds"], "openfst_s": grid["openfst_seconds"],
                                                  "ratio": grid["ratio_ours_to_openfst"], "lattices": grid["lattices"],
                                                  "agree": grid["agree"]}
    return out


def format_summary(summary: Mapping[str, Any]) -> str:
    """The headline as lines of text."""
    r, d, m = summary["reader"], summary["determinize"], summary["lm"]
    lines = [f"reader: {r['mb_per_s']} MB/s; tokenise bound {r['tokenise_bound_mb_per_s']} MB/s (ratio "
             f"{r['ratio_to_tokenise']}); disk read {r['disk_read_mb_per_s']} MB/s (ratio {r['ratio_to_disk_read']}); "
             f"bound arrays bit-equal: {r['bound_bit_equal']}",
             f"determinize as called: ours {d['ours_as_called_s']} s, " + (
                 f"OpenFst pruned {d['openfst_pruned_s']} s (ratio {d['ratio']}); best path agrees [of]: "
                 f"{d['best_path_agrees']}" if d["openfst_pruned_s"] is not None
                 else "OpenFst skipped (kaldifst is not importable)")]
    for mode in ("pruned", "exact"):
        if f"grid_{mode}" in d:
            g = d[f"grid_{mode}"]
            lines.append(f"determinize like-for-like ({mode}, grid acceptor, {g['lattices']} lattices): ours "
                         f"{g['ours_s']} s, OpenFst {g['openfst_s']} s (ratio {g['ratio']}); agree {g['agree']}")
    lines.append(f"LM scoring: {m['measured_s']} s measured, {m['gflop']} GFLOP take {m['flop_bound_s']} s at the "
                 f"F.linear rates (ratio {m['ratio']}; cell {m['cell'][0]} s vs {m['cell'][1]} s, output layer "
                 f"{m['output'][0]} s vs {m['output'][1]} s); with the output's log-sum-exp in the bound "
                 f"{m['with_logsumexp_bound_s']} s (ratio {m['ratio_with_logsumexp']})")
    return "\n".join(lines)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


if __name__ == "__main__":
    main()
