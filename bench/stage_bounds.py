"""What each stage of rescoring costs, beside a bound measured in the same run (issue 40, item 3).

On the first ``--limit`` PocketSphinx dev lattices (``runs/pocketsphinx/dev_clean``) with ``models/librispeech``,
one thread, timings the least of 3 runs: (1) ``read_pocketsphinx`` on text in memory against :func:`tokenise_bound`
(the least any reader must do; its arrays must be the reader's, bit for bit) and reading the bytes; (2) ours
determinizing each lattice as rescoring does against OpenFst (``kaldifst``: ``RmEpsilon`` + ``Determinize``, the
beam as weight threshold) on the float32 scalar acceptor of the same lattice (:func:`scalar_acceptor`: best
paths must agree), and like for like on its costs rounded to a ``2^-k`` grid (:func:`on_grid`: path sums exact
in float32): exact (up to ``--exact-max-states``) the same minimal automaton and best path, pruned the same best
path, and ours exact then arc-pruned the same minimal automaton; (3) the neural LM's measured seconds against
its matmul FLOPs (:func:`counting_lm`, :func:`lm_flops`) at ``F.linear`` rates of the same shapes timed now
(:func:`lm_bound`), without and with the output layer's log-sum-exp.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 10 .venv/bin/python -m bench.stage_bounds --limit 30

``kaldifst`` is bench-only (``.venv/bin/pip install kaldifst``); without it the OpenFst columns are skipped with
a note. Results: ``bench/results/stage_bounds.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F

from bench.common import REPO_ROOT, RESULTS, command_line, environment, shown, write_json
from lattices.formats.pocketsphinx import LINK_NAMES  # the reader's own: its fast path is this bound

T = TypeVar("T")
SET, MODEL, REPEAT = REPO_ROOT / "runs" / "pocketsphinx" / "dev_clean", REPO_ROOT / "models" / "librispeech", 3
GRID_DELTA_FRACTION = 0.25  # OpenFst's delta on the grid, a quarter step: grid values never "approximately equal"
FLOAT32_TOLERANCE = 1e-3  # how far OpenFst's float32 best cost may lie from ours on the unrounded acceptor


def best_of(fn: Callable[[], T], repeat: int = REPEAT) -> tuple[float, T]:
    """The least wall seconds of ``repeat`` calls of ``fn``, and its last result."""
    best = math.inf
    for _ in range(repeat):
        tick = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - tick)
    return best, result


def ratio(value: float, bound: float) -> float | None:
    """``value / bound`` (how many times its bound a stage takes); None without a bound."""
    return value / bound if bound > 0 else None


def spread(values: Sequence[float]) -> dict[str, float] | None:
    """Min, median and max of per-lattice ratios (None for none)."""
    return {"min": min(values), "median": float(np.median(values)), "max": max(values)} if values else None


@contextlib.contextmanager
def wrapped(*targets: tuple[Any, str, Callable[[float, tuple, dict, bool], None]]) -> Iterator[None]:
    """Within the block, per ``(owner, name, after)``, each call of ``owner.name`` (patched on the owner) ends
    with ``after(seconds, args, kwargs, raised)``."""
    def wrap(fn: Callable[..., Any], after: Callable[[float, tuple, dict, bool], None]) -> Callable[..., Any]:
        def call(*args: Any, **kw: Any) -> Any:
            tick, raised = time.perf_counter(), True
            try:
                out, raised = fn(*args, **kw), False
                return out
            finally:
                after(time.perf_counter() - tick, args, kw, raised)
        return call

    with contextlib.ExitStack() as stack:
        for owner, name, after in targets:
            stack.enter_context(mock.patch.object(owner, name, wrap(getattr(owner, name), after)))
        yield


def tokenise_bound(text: str) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, list[str]]]:
    """A lattice's links (``J= S= E= a= p=`` lines) by ``str.translate`` + ``np.fromstring``: int64 ``src``,
    ``dst``, float64 ``acoustic``, ``posterior``; and its nodes' float64 times and words by two regexes."""
    links, nodes = text.find("\nJ="), text.find("\nI=")
    values = np.fromstring(text[links + 1:].translate(LINK_NAMES) if links >= 0 else "", dtype=np.float64, sep=" ")
    if values.size % 5:
        raise ValueError(f"the link block holds {values.size} numbers, not five per link")
    cols, block = values.reshape(-1, 5), text[nodes + 1:links if links >= 0 else len(text)] if nodes >= 0 else ""
    return ({"src": cols[:, 1].astype(np.int64), "dst": cols[:, 2].astype(np.int64),
             "acoustic": np.ascontiguousarray(cols[:, 3]), "posterior": np.ascontiguousarray(cols[:, 4])},
            (np.array(re.findall(r"\tt=(\S+)", block), dtype=np.float64), re.findall(r"\tW=(\S+)", block)))


def bit_equal(lattice: Any, links: Mapping[str, np.ndarray]) -> dict[str, bool]:
    """Per column of :func:`tokenise_bound`'s ``links``: the same dtype and bits in the first arcs of the reader's
    ``lattice`` (arc id = link id; one ulp differs, and so does -0.0 from 0.0)."""
    ours = {"src": lattice.src, "dst": lattice.dst, "acoustic": lattice.acoustic,
            "posterior": lattice.arc_extra["ps_posterior"]}
    return {k: bool(a.dtype == b.dtype and np.array_equal(a.view(np.int64), b.view(np.int64)))
            for k, b in links.items() for a in [ours[k][:len(b)].numpy()]}


def measure_reader(files: Sequence[Path]) -> dict[str, Any]:
    """Stage 1: the reader and its two bounds over ``files``, and the bit-equality check (not on a lattice the
    reader trimmed: its arcs are not the file's links)."""
    from lattices.formats.pocketsphinx import read_pocketsphinx

    rows = []
    for path in files:
        disk_read, raw = best_of(path.read_bytes)
        text = raw.decode("utf-8")
        reader, lattice = best_of(lambda: read_pocketsphinx(text, str(path)))
        tokenise, (links, _) = best_of(lambda: tokenise_bound(text))
        equal = None if "ps_trimmed_states" in lattice.meta else bit_equal(lattice, links)
        rows.append({"bytes": len(raw), "links": len(links["src"]), "reader": reader, "tokenise": tokenise,
                     "disk_read": disk_read, "equal": equal})
    total = {k: sum(r[k] for r in rows) for k in rows[0] if k != "equal"}
    equal = [r["equal"] for r in rows if r["equal"]]
    return {"files": len(files), "bytes": total["bytes"], "links": total["links"],
            "reader": {"seconds": total["reader"], "mb_per_s": ratio(total["bytes"] / 1e6, total["reader"])},
            "bounds": {k: {"seconds": total[k], "mb_per_s": ratio(total["bytes"] / 1e6, total[k]),
                           "reader_ratio": ratio(total["reader"], total[k]),
                           "reader_ratio_per_file": spread([r["reader"] / r[k] for r in rows])}
                       for k in ("tokenise", "disk_read")},
            "bound_arrays_bit_equal_to_reader": {k: all(e[k] for e in equal) for k in ("src", "dst", "acoustic",
                                                                                      "posterior")},
            "files_compared": len(equal)}


def scalar_acceptor(lattice: Any, weights: Any, skip: Sequence[str] | frozenset[str]) -> Any:
    """The lattice as our determinizer sees it, in one score ``first_pass`` = ``x . w`` (score components ``x``,
    ordering ``weights``; cost = -score), ``skip`` symbols (and 0, disambiguation) as epsilon word 0."""
    from lattices.determinize import epsilon_words, ordering_vector, score_components

    names, x, fx = score_components(lattice)
    w, words = ordering_vector(weights, names), epsilon_words(lattice, skip)
    return lattice.replace(words=torch.from_numpy(words), scores={"first_pass": torch.from_numpy(x @ w)},
                           final_scores={"first_pass": torch.from_numpy(fx @ w)}, arc_extra={}, state_extra={})


def on_grid(acc: Any, most: int = 10) -> tuple[Any, int]:
    """``acc`` with its scores rounded to a grid ``2^-k``, and ``k``: at most ``most``, with every path sum
    (longest path times largest cost, plus largest final cost) below ``2^23`` steps: exact in float32."""
    scores, finals = acc.scores["first_pass"], acc.final_scores["first_pass"]
    bound = int(acc.levels.max()) * float(scores.abs().max()) + float(finals.abs().max()) if len(scores) else 0.0
    bits = min(most, 23 - math.ceil(math.log2(bound + 1.0)))
    return acc.replace(scores={"first_pass": torch.round(scores * 2 ** bits) / 2 ** bits},
                       final_scores={"first_pass": torch.round(finals * 2 ** bits) / 2 ** bits}), bits


def openfst_run(acc: Any, beam: float | None, delta: float | None = None) -> tuple[float, dict[str, Any]]:
    """OpenFst's ``RmEpsilon`` + ``Determinize`` of ``acc`` as a float32 ``StdVectorFst``, pruned to ``beam`` or
    exact (None), ``delta`` its comparison delta (None: OpenFst's): the least seconds, and the result's states
    and arcs, those of its minimization, its best path's cost and words."""
    import kaldifst

    fst, options = kaldifst.StdVectorFst(), {} if delta is None else {"delta": delta}
    for _ in range(acc.num_states):
        fst.add_state()
    fst.start = int(acc.start)
    for s, d, word, score in zip(*(t.tolist() for t in (acc.src, acc.dst, acc.words, acc.scores["first_pass"]))):
        fst.add_arc(s, kaldifst.StdArc(word, word, -score, d))
    for s, score in zip(acc.finals.tolist(), acc.final_scores["first_pass"].tolist()):
        fst.set_final(s, -score)

    def run() -> Any:
        work = fst.copy()
        kaldifst.rmepsilon(work)
        return kaldifst.determinize(work, weight="" if beam is None else repr(float(beam)), **options)

    seconds, det = best_of(run)
    minimal = det.copy()
    kaldifst.minimize(minimal, **options)
    _, labels, _, weight = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(det))
    arcs = [sum(f.num_arcs(s) for s in range(f.num_states)) for f in (det, minimal)]
    return seconds, {"states": det.num_states, "arcs": arcs[0], "min_states": minimal.num_states, "min_arcs": arcs[1],
                     "best_cost": float(weight.value), "best_words": [int(w) for w in labels if w != 0]}


def our_summary(lattice: Any, weights: Any = (1.0,), prune_beam: float | None = None) -> dict[str, Any]:
    """:func:`openfst_run`'s summary of one of our determinized lattices (best path under ``weights``); with
    ``prune_beam``, of a one-score lattice without its arcs on no path within that of the best (``prune``, as
    OpenFst's pruned determinization keeps them)."""
    from lattices.determinize import ordering_vector, score_components
    from lattices.minimize import minimize
    from lattices.reduce import prune
    from lattices.search import Dag

    if prune_beam is not None:
        lattice = prune(lattice, prune_beam, 1.0, 0.0, skip=(), score_weights=(("first_pass", 1.0),))[0]
    minimal, (names, x, fx) = minimize(lattice), score_components(lattice)
    w = ordering_vector(weights, names)
    best, arcs = Dag(lattice.num_states, lattice.start, lattice.src, lattice.dst, torch.from_numpy(x @ w),
                     lattice.finals, torch.from_numpy(fx @ w), lattice.levels).best_path()
    return {"states": lattice.num_states, "arcs": lattice.num_arcs, "min_states": minimal.num_states,
            "min_arcs": minimal.num_arcs, "best_cost": -float(best),
            "best_words": [w for w in lattice.words[arcs].tolist() if w != 0]}


def compare_determinization(call: Mapping[str, Any], exact_max_states: int, openfst: bool) -> dict[str, Any]:
    """Stage 2 on one call rescoring made (none if its state cap stopped it): ``{ours_s, ours}``, with ``openfst``
    and ``{openfst_s, openfst, agree}``, of ``as_called`` (OpenFst on the float acceptor), ``grid_exact``
    (skipped past ``exact_max_states`` of ours) and ``grid_pruned`` (both on the grid acceptor)."""
    from lattices.determinize import DeterminizationTooLarge, determinize

    lattice, weights, options = call["lattice"], call["weights"], call["options"]
    row = {"key": lattice.key, "in_rescoring_s": call["seconds"], "stopped": call["stopped"]}
    beam, best, exact = options.get("beam"), ("best_cost", "best_words"), None
    grid, bits = on_grid(acc := scalar_acceptor(lattice, weights, options.get("skip", ())))
    for name, lat, w, kw, fsa, delta, checks in (
            ("as_called", lattice, weights, options, acc, None, best),
            ("grid_exact", grid, [1.0], {"max_states": exact_max_states, "skip": ()}, grid,
             GRID_DELTA_FRACTION * 2.0 ** -bits, ("min_states", "min_arcs", *best)),
            ("grid_pruned", grid, [1.0], {"beam": beam, "skip": ()}, grid, GRID_DELTA_FRACTION * 2.0 ** -bits, best)):
        if call["stopped"] or (name != "as_called" and not openfst) or (name == "grid_pruned" and beam is None):
            break
        try:
            seconds, det = best_of(lambda: determinize(lat, w, **kw))
        except DeterminizationTooLarge:
            continue  # counted as skipped
        entry = row[name] = {"ours_s": seconds, "ours": (ours := our_summary(det, w))}
        exact = det if name == "grid_exact" else exact
        tolerance = FLOAT32_TOLERANCE if delta is None else 2.0 ** -bits / 2
        if openfst:
            entry["openfst_s"], theirs = openfst_run(fsa, kw.get("beam"), delta)
            entry |= {"openfst": theirs, "agree": {k: abs(ours[k] - theirs[k]) <= tolerance if k == "best_cost"
                                                   else ours[k] == theirs[k] for k in checks}}
        if openfst and name == "grid_pruned" and exact is not None:  # ours pruned on the fly keeps more, by design
            pruned = our_summary(exact, prune_beam=beam)
            entry["agree"] |= {f"arc_pruned_{k}": pruned[k] == theirs[k] for k in ("min_states", "min_arcs")}
    return row


def summarise_determinization(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Totals of :func:`compare_determinization` rows; per comparison its seconds, their ratio and per-lattice
    ratios, ``[lattices that agree, lattices checked]`` per check, states and arcs, the lattices that disagree."""
    out: dict[str, Any] = {"lattices": len(rows), "stopped_at_cap": sum(r["stopped"] for r in rows),
                           "ours_as_called_seconds_in_rescoring": sum(r["in_rescoring_s"] for r in rows)}
    for name in ("as_called", "grid_pruned", "grid_exact"):
        done = [(r["key"], r[name]) for r in rows if name in r]
        ours = sum(e["ours_s"] for _, e in done)
        out[name] = {"lattices": len(done), "skipped": len(rows) - len(done), "ours_seconds": ours}
        if not done or "agree" not in done[0][1]:
            continue  # no OpenFst
        theirs, checks = sum(e["openfst_s"] for _, e in done), dict.fromkeys(k for _, e in done for k in e["agree"])
        out[name] |= {
            "openfst_seconds": theirs, "ratio_ours_to_openfst": ratio(ours, theirs),
            "ratio_per_lattice": spread([e["ours_s"] / e["openfst_s"] for _, e in done]),
            "agree": {k: [sum(bool(e["agree"].get(k)) for _, e in done), sum(k in e["agree"] for _, e in done)]
                      for k in checks},
            **{f"{side}_{k}": [sum(e[side][m] for _, e in done) for m in fields] for side in ("ours", "openfst")
               for k, fields in (("states_arcs", ("states", "arcs")), ("min_states_arcs", ("min_states", "min_arcs")))},
            "best_cost_max_abs_diff": max(abs(e["ours"]["best_cost"] - e["openfst"]["best_cost"]) for _, e in done),
            "disagree": [key for key, e in done if not all(e["agree"].values())]}
    return out


def lm_shapes(model: Any) -> dict[str, list[int]]:
    """``[in, out]`` of each matmul of a recurrent LM with a gated cell and an adaptive softmax: ``recurrent``
    (state -> gates), ``input`` (embedding -> gates), ``head``, per tail cluster ``tail<i>_projection``, ``_output``."""
    cell, adaptive = model.cell, model.adaptive
    if adaptive is None or not hasattr(cell, "recurrent_weights"):
        raise ValueError("the FLOP count knows a gated recurrent cell and an adaptive softmax only")
    shape = lambda linear: [linear.in_features, linear.out_features]  # noqa: E731
    return {"recurrent": shape(cell.recurrent_weights), "input": shape(cell.input_weights),
            "head": shape(adaptive.head),
            **{f"tail{i}_{part}": shape(layer) for i, tail in enumerate(adaptive.tail)
               for part, layer in zip(("projection", "output"), tail)}}


def linear_flops(rows: int, in_features: int, out_features: int) -> int:
    """FLOPs of ``rows`` rows through an ``in -> out`` linear layer: ``2 * rows * in * out`` (no bias)."""
    return 2 * rows * in_features * out_features


def lm_flops(counts: Mapping[str, Any], shapes: Mapping[str, list[int]]) -> dict[str, int]:
    """Matmul FLOPs of :func:`counting_lm`'s counts: per matmul of :func:`lm_shapes` (its rows), ``targets`` (a dot
    product per picked logit, in the head and in its tail cluster), ``cell``, ``output``, ``total``."""
    out = {name: linear_flops(counts[f"{name.split('_')[0]}_rows"], *shape) for name, shape in shapes.items()}
    out["targets"] = linear_flops(counts["targets"], shapes["head"][0], 1) + sum(
        linear_flops(counts[f"{name[:-11]}_targets"], shape[1], 1) for name, shape in shapes.items()
        if name.endswith("_projection"))
    cell = out["recurrent"] + out["input"]
    return out | {"cell": cell, "output": sum(out.values()) - cell, "total": sum(out.values())}


@contextlib.contextmanager
def counting_lm(model: Any) -> Iterator[Counter]:
    """Within the block, ``model``'s scoring counted (:func:`wrapped` on the instance): seconds of ``score``
    (``score_contexts``: calls, ``contexts``, ``targets``), ``features`` (``context_features``) and ``output``
    (``_adaptive_pick``); rows and calls of ``recurrent``, ``input`` (the cell's ``step_from``, ``project``), ``head``
    and ``tail<i>`` (a cluster's distinct contexts); ``tail<i>_targets``."""
    lows, counts = [lo for lo, _ in model._clusters()], Counter()

    def rows(name: str, n: int) -> None:
        counts.update({f"{name}_rows": n, f"{name}_calls": 1})

    def picked(seconds: float, args: tuple, *_: Any) -> None:
        features, which, targets = args[:3]
        counts.update(output_seconds=seconds)
        rows("head", len(features))
        cluster = torch.bucketize(targets, torch.tensor(lows, device=targets.device), right=True) - 1
        for i in range(len(lows)):
            if bool((wanted := cluster == i).any()):
                rows(f"tail{i}", torch.unique(which[wanted]).numel())
                counts[f"tail{i}_targets"] += int(wanted.sum())

    with wrapped((model, "score_contexts", lambda s, a, *_: counts.update(
                     score_seconds=s, score_calls=1, contexts=len(a[0]), targets=len(a[2]))),
                 (model, "context_features", lambda s, *_: counts.update(features_seconds=s)),
                 (model, "_adaptive_pick", picked),
                 (model.cell, "step_from", lambda s, a, *_: rows("recurrent", a[0].numel() // a[0].shape[-1])),
                 (model.cell, "project", lambda s, a, *_: rows("input", a[0].numel() // a[0].shape[-1]))):
        yield counts


@torch.no_grad()
def linear_seconds(rows: int, shape: Sequence[int], bias: bool, logsumexp: bool = False) -> float:
    """Seconds a call of ``F.linear`` takes on float32 ``(rows, in)`` by ``(out, in)``, and then with
    ``logsumexp`` the logits' ``torch.log_softmax`` (as the fp32 output layer, ``lm.output``): the least of 3
    timings of ~12 ms of calls, after a warm-up."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, shape[0], generator=gen)
    weight = torch.randn(shape[1], shape[0], generator=gen) / math.sqrt(shape[0])  # unit logits: no denormal exp
    b = torch.randn(shape[1], generator=gen) if bias else None
    fn = (lambda: torch.log_softmax(F.linear(x, weight, b), dim=1)) if logsumexp else (lambda: F.linear(x, weight, b))

    def calls(n: int) -> None:  # each result dropped before the next call, as the model's are
        for _ in range(n):
            fn()

    loops = max(2, int(0.0125 / max(best_of(lambda: calls(1))[0], 1e-7)))
    return best_of(lambda: calls(loops))[0] / loops


def lm_bound(counts: Mapping[str, Any], shapes: Mapping[str, list[int]]) -> dict[str, Any]:
    """Per matmul its ``F.linear`` rate at its mean rows a call and the seconds its FLOPs (:func:`lm_flops`) take
    at that rate, also with the log-sum-exp of the logits it makes; their sums against the measured seconds."""
    flops, parts, bound = lm_flops(counts, shapes), {}, Counter()
    for name, shape in shapes.items():
        key, bias, cell = name.split("_")[0], not name.startswith("tail"), name in ("recurrent", "input")
        per_call = max(1, round(counts[f"{key}_rows"] / counts[f"{key}_calls"])) if counts[f"{key}_calls"] else 1
        rate = linear_flops(per_call, *shape) / linear_seconds(per_call, shape, bias) / 1e9
        part = parts[name] = {"rows_per_call": per_call, "shape": shape, "bias": bias, "flops": flops[name],
                              "gflops_per_s": rate, "bound_s": flops[name] / rate / 1e9}
        if name == "head" or name.endswith("_output"):  # the log-sum-exp over these logits, beside the matmul
            part["with_logsumexp_s"] = counts[f"{key}_rows"] / per_call * linear_seconds(per_call, shape, bias, True)
        bound.update({"cell": part["bound_s"]} if cell else {
            "output": part["bound_s"], "output_with_logsumexp": part.get("with_logsumexp_s", part["bound_s"])})
    bound.update(total=bound["cell"] + bound["output"],
                 total_with_logsumexp=bound["cell"] + bound["output_with_logsumexp"])
    peak = linear_flops(2048, shapes["head"][0], 2048) / linear_seconds(2048, [shapes["head"][0], 2048], True) / 1e9
    measured = {"score": counts["score_seconds"], "cell": counts["features_seconds"],
                "output": counts["output_seconds"]}
    return {"counts": dict(counts), "flops": flops, "gflop": flops["total"] / 1e9, "parts": parts,
            "peak_linear_gflops_per_s": peak, "bound_at_peak_s": flops["total"] / peak / 1e9, "measured_s": measured,
            "bound_s": dict(bound), "achieved_gflops_per_s": ratio(flops["total"] / 1e9, measured["score"]),
            "ratio": {k: ratio(measured[m], bound[b]) for k, m, b in (
                ("score", "score", "total"), ("cell", "cell", "cell"), ("output", "output", "output"),
                ("score_with_logsumexp", "score", "total_with_logsumexp"),
                ("output_with_logsumexp", "output", "output_with_logsumexp"))}}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The three stages on the first ``--limit`` lattices; the record (floats to 4 digits) written to ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m bench.stage_bounds", description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=30, help="the first N lattices of the set (default 30)")
    parser.add_argument("--exact-max-states", type=int, default=20_000, help="cap of the exact like-for-like check")
    parser.add_argument("--out", type=Path, default=RESULTS / "stage_bounds.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if not (files := sorted((SET / "lattices").glob("*.slf"))[:args.limit]):
        raise SystemExit(f"no lattices in {SET / 'lattices'}: build them (python -m bench.pocketsphinx_set)")
    try:
        import kaldifst
        openfst, note, version = True, "", kaldifst.__version__
    except ImportError as err:
        openfst, note, version = False, f"kaldifst is not importable ({err}): no OpenFst columns", None
    record: dict[str, Any] = {
        "command": command_line("bench.stage_bounds", argv), "set": shown(SET), "model": shown(MODEL),
        "limit": args.limit, "lattices": len(files), "repeat": REPEAT, "environment": environment(), "note": note,
        "kaldifst": version,
        "reader": measure_reader(files)}
    import afp
    import lattices.reduce as reduce
    from lm.scorer import LMScorer

    model = afp.load_model(MODEL)
    parts = [model.scorer, *getattr(model.scorer, "scorers", ())]
    neural = next(part for part in parts if isinstance(part, LMScorer))
    model.rescore([str(files[0])])  # warm-up, not counted
    calls: list[dict[str, Any]] = []
    others: list[float] = []
    called = lambda s, a, kw, raised: calls.append({  # noqa: E731
        "lattice": a[0], "weights": dict(a[1]) if isinstance(a[1], Mapping) else a[1], "seconds": s, "stopped": raised,
        "options": {k: v for k, v in kw.items() if k != "report"}})
    with counting_lm(neural.loaded.model) as counts, wrapped((reduce, "determinize", called), *(
            (p, "score", lambda s, *_: others.append(s)) for p in parts[1:] if p is not neural)):
        wall, results = best_of(lambda: model.rescore([str(f) for f in files]), 1)
    record["rescore"] = {
        "seconds": wall, "engine_timing_s": {k: sum(r[0].seconds.get(k, 0.0) for r in results)
                                             for k in results[0][0].seconds},
        "neural_score_s": counts["score_seconds"], "other_parts_score_s": sum(others), "determinize_calls": len(calls),
        "determinize_s": sum(c["seconds"] for c in calls)}
    rows = [compare_determinization(call, args.exact_max_states, openfst) for call in calls]
    record["determinize"] = {"summary": summarise_determinization(rows), "not_determinized": len(files) - len(calls)}
    shapes = lm_shapes(neural.loaded.model)
    record["lm"] = {"shapes": shapes, "precision": neural.precision, **lm_bound(counts, shapes)}
    out = json.loads(json.dumps(record), parse_float=lambda s: float(f"{float(s):.4g}"))
    write_json(args.out, out)
    print(f"reader {out['reader']['bounds']['tokenise']['reader_ratio']}x its tokenising bound, determinization "
          f"{out['determinize']['summary']['as_called'].get('ratio_ours_to_openfst')}x OpenFst's, LM scoring "
          f"{out['lm']['ratio']['score']}x its matmul FLOP bound; wrote {shown(args.out)}")
    return record


if __name__ == "__main__":
    main()
