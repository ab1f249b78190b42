"""``afp tune``: choose rescoring weights on a dev set by word error rate.

The dev set is expanded and scored once (:func:`lattices.rescore.score_for_options`); every grid
point only recombines the stored score components (:mod:`lattices.scored`) and searches again.

* Tree-shaped inputs (n-best lists: every path is one hypothesis) are reduced to a
  ``(hypotheses, components)`` matrix per utterance, so the whole grid is one matrix product and
  an argmax per utterance, and MBR's expected errors one more product with the precomputed
  hypothesis-to-hypothesis edit distances. The oracle WER is the best hypothesis's.
* Other lattices are searched (best path on the expanded lattice) once per grid point and
  utterance; MBR there uses each point's ``mbr_nbest`` best distinct sequences. Their oracle
  WER is not computed (it needs a lattice-to-reference alignment) and is reported as null.

WER is computed with kaldialign (:mod:`afp.wer`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy
import torch
from torch import Tensor

from lattices.expand import PAD
from lattices.rescore import RescoreOptions, first_pass_best, rescore_scored, score_for_options
from lattices.scored import DEFAULT_ACOUSTIC_SCALE, TAIL, ScoredLattice, component_vector, point_weights
from lattices.scorer import ContextScorer, WindowScorer
from afp.wer import WerStats, case_differs, match_references, word_errors

GRID_NAMES = ("lm_weight", "old_lm_weight", "word_penalty", "unk_penalty")


@dataclass(frozen=True)
class Grid:
    """The values to try of each weight (the product is searched; ``afp tune``'s defaults are
    :data:`afp.tune_job.GRID_DEFAULTS`)."""

    lm_weights: tuple[float, ...]
    old_lm_weights: tuple[float, ...]
    word_penalties: tuple[float, ...]
    unk_penalties: tuple[float, ...]

    def points(self) -> list[dict[str, float]]:
        values = (self.lm_weights, self.old_lm_weights, self.word_penalties, self.unk_penalties)
        for name, options in zip(GRID_NAMES, values):
            if not options or not all(math.isfinite(v) for v in options):
                raise ValueError(f"{name}: give at least one finite value, got {options}")
        return [dict(zip(GRID_NAMES, combo)) for combo in itertools.product(*values)]


@dataclass
class _Utterance:
    """What the grid needs of one utterance."""

    key: str
    ref: list[str]
    first_pass: WerStats  # the first pass's 1-best's errors (of first_words, else the first hypothesis)
    acoustic_scale: float = DEFAULT_ACOUSTIC_SCALE  # the default w_acoustic (lattice header)
    first_words: list[str] | None = None  # the first pass's 1-best (tables: None is the first hypothesis)
    hyp_words: list[list[str]] | None = None  # tree inputs: every hypothesis
    hyp_parts: Tensor | None = None  # (H, C)
    errors: list[WerStats] | None = None  # (H,)
    error_counts: numpy.ndarray | None = None  # (H,) errors of each hypothesis
    group: Tensor | None = None  # (H,) index of each hypothesis's distinct word sequence
    group_errors: numpy.ndarray | None = None  # (G,) errors of each distinct word sequence
    distances: Tensor | None = None  # (G, G) between distinct word sequences, for MBR
    scored: ScoredLattice | None = None  # other lattices
    lines: Any = None  # other lattices: their line searches' view (lattice_lines), made on first use


def hypothesis_table(scored: ScoredLattice) -> tuple[list[list[str]], Tensor] | None:
    """Every path of a tree-shaped expanded lattice: its words and its ``(C,)`` components, in
    the n-best list's order when the lattice is one (``final_extra["hypothesis"]``).

    Returns None when some state has two incoming arcs (not a tree)."""
    e, lattice = scored.expansion, scored.lattice
    dst = e.dst.cpu()
    indegree = torch.bincount(dst, minlength=e.num_states)
    if e.num_states and int(indegree.max()) > 1:
        return None
    parts = scored.arc_parts.cpu().numpy()
    acc = numpy.zeros((e.num_states, parts.shape[1]))
    src, dsts = e.src.cpu().tolist(), dst.tolist()
    incoming = [-1] * e.num_states
    for a in range(e.num_arcs):  # arcs are sorted by source, and a parent's id is below its children's
        acc[dsts[a]] = acc[src[a]] + parts[a]
        incoming[dsts[a]] = a
    symbols = lattice.symbols
    word_of = [symbols[w] if lm != PAD else None
               for w, lm in zip(lattice.words[e.arc_orig].tolist(), e.arc_lm_word.tolist())]
    words, rows = [], []
    for state in e.finals.tolist():
        path, s = [], state
        while incoming[s] >= 0:
            a = incoming[s]
            if word_of[a] is not None:
                path.append(word_of[a])
            s = src[a]
        words.append(path[::-1])
        rows.append(acc[state])
    parts_out = torch.from_numpy(numpy.stack(rows)) + scored.final_parts.cpu()
    ranks = lattice.final_extra.get("hypothesis")
    if ranks is not None:
        order = torch.argsort(ranks.cpu()[e.final_orig.cpu()], stable=True)
        words, parts_out = [words[i] for i in order.tolist()], parts_out[order]
    return words, parts_out


class Tuner:
    """Scores a dev set once, then evaluates weight grids on it.

    Utterances come in as lattices (:meth:`add`: expanded and scored by the tuner's scorer) or as
    ready hypothesis tables (:meth:`add_table`: e.g. a full-recurrence RNN's sentence scores of
    n-best lists, for a baseline tuned the same way)."""

    def __init__(self, scorer: ContextScorer | None, options: RescoreOptions, refs: dict[str, list[str]],
                 device: str | None = None, old_lm: ContextScorer | None = None, mbr: bool = False,
                 features: Mapping[str, WindowScorer] | None = None) -> None:
        """``mbr``: also prepare MBR decoding (hypothesis distances) whatever ``options.decode`` says.
        ``features``: acausal window models by name (named scores the joint search tunes)."""
        self.scorer, self.options, self.refs, self.device, self.old_lm = scorer, options, refs, device, old_lm
        self.features = dict(features or {})
        self.want_mbr = mbr or options.decode == "mbr"
        self.utterances: list[_Utterance] = []
        self.names: tuple[str, ...] | None = None
        #: words compared without regard to case (:func:`afp.wer.case_differs`: lower-case lattices
        #: against upper-case references), decided from every utterance added so far (their
        #: references against their lattices' words), the word errors of those already added counted
        #: again when an utterance changes it; None before the first
        self.ignore_case: bool | None = None
        self._case_refs: set[str] = set()
        self._case_hyps: set[str] = set()
        self._vector_caches: dict[tuple[Any, ...], dict[tuple[tuple[str, float], ...], numpy.ndarray]] = {}

    def point_vectors(self, scored: ScoredLattice) -> Callable[[Mapping[str, float]], numpy.ndarray]:
        """``point -> `` float64 ``(C,)``: :func:`weight_vector` of ``scored`` under these options at a
        point of the joint search (``options.at_point``). Lattices that agree on everything the
        vector reads of them (component names, default acoustic scale and word penalty, the
        recogniser's own weights) share one cache of the last points' vectors: a line search asks
        every lattice for the same two points."""
        signature = (scored.names, scored.named, scored.default_acoustic_scale, scored.default_word_penalty,
                     repr(scored.recogniser_weights()))
        cache = self._vector_caches.setdefault(signature, {})

        def vector(point: Mapping[str, float]) -> numpy.ndarray:
            key = tuple(sorted(point.items()))
            found = cache.get(key)
            if found is None:
                if len(cache) >= 8:
                    cache.pop(next(iter(cache)))
                found = cache[key] = weight_vector(scored, self.options.at_point(point)).cpu().numpy()
            return found

        return vector

    def _check_names(self, names: tuple[str, ...], key: str) -> None:
        if self.names is None:
            self.names = names
        elif names != self.names:
            raise ValueError(f"lattice {key!r} has scores {names}, the first had {self.names}: "
                             "a dev set must carry the same named scores throughout")

    def add(self, lattices: Iterable[Any], progress: bool = False,
            score: Callable[[Iterable[Any]], Iterable[ScoredLattice]] | None = None) -> None:
        """Expand, score and tabulate lattices (their keys must have references). ``score``: what
        scores them, in order (:meth:`afp.rescore_job.LoadedSetup.scored`, worker processes);
        None: this tuner's scorer, here, one after another."""
        from tqdm import tqdm

        if self.scorer is None and score is None:
            raise ValueError("this tuner has no scorer: use add_table")
        lattices = list(lattices)
        refs = match_references(self.refs, [lattice.key for lattice in lattices])
        self._see_case(refs.values(), (lattice_words(lattice) for lattice in lattices))
        if score is None:
            score = functools.partial(map, lambda lattice: score_for_options(
                lattice, self.scorer, self.options, self.device, self.old_lm, self.features))
        shown = tqdm(lattices, desc="scoring", unit="lattice", disable=not progress)
        for lattice, scored in zip(lattices, score(shown), strict=True):
            self.add_scored(scored, refs[lattice.key])

    def add_scored(self, scored: ScoredLattice, ref: list[str] | None = None) -> None:
        """One utterance already expanded and scored (what :meth:`add` does after scoring; a
        caller may have scored it otherwise, e.g. a baseline's approximate LM scores in the
        ``new_lm`` column). ``ref``: its reference (default: the tuner's, by the lattice's key)."""
        key = scored.lattice.key
        if ref is None:
            ref = match_references(self.refs, [key])[key]
        self._check_names(scored.names, key)
        self._see_case([ref], [lattice_words(scored.lattice)])
        labels = torch.where(scored.expansion.arc_lm_word != PAD, scored.lattice.words[scored.expansion.arc_orig], -1)
        first = first_pass_best(scored, scored.first_pass_weights(self.options.weights(1.0, scored)), labels)
        table = hypothesis_table(scored)
        if table is not None:
            self.add_table(key, ref, table[0], table[1], scored.names, first_words=first.words,
                           acoustic_scale=scored.default_acoustic_scale)
            return
        self.utterances.append(self._counted(_Utterance(key=key, ref=ref, first_pass=WerStats.zero(),
                                                        acoustic_scale=scored.default_acoustic_scale,
                                                        first_words=first.words, scored=scored)))

    def add_table(self, key: str, ref: list[str], words: list[list[str]], parts: Tensor, names: tuple[str, ...],
                  first_words: list[str] | None = None, acoustic_scale: float | None = None) -> None:
        """One utterance as hypotheses: their words and ``(H, C)`` components named ``names``
        (:mod:`lattices.scored`'s order), best first pass first when they are an n-best list.

        ``first_words``: the first pass's 1-best (default: the first hypothesis).
        ``acoustic_scale``: the default ``w_acoustic`` (default: the options', else 0.1)."""
        self._check_names(names, key)
        self._see_case([ref], words)
        default = acoustic_scale if acoustic_scale is not None else (
            self.options.acoustic_scale if self.options.acoustic_scale is not None else DEFAULT_ACOUSTIC_SCALE)
        distinct: dict[tuple[str, ...], int] = {}
        group = torch.tensor([distinct.setdefault(tuple(w), len(distinct)) for w in words], dtype=torch.int64)
        utt = _Utterance(key=key, ref=ref, first_pass=WerStats.zero(), acoustic_scale=default, hyp_words=words,
                         hyp_parts=parts.cpu(), group=group, first_words=first_words)
        if self.want_mbr:
            from lattices.mbr import edit_distance_matrix

            utt.distances = edit_distance_matrix([list(w) for w in distinct])
        self.utterances.append(self._counted(utt))

    def _see_case(self, refs: Iterable[Sequence[str]], hyps: Iterable[Sequence[str]]) -> None:
        """Add references' and hypotheses' words to the evidence :attr:`ignore_case` is decided
        from, and decide it again; the utterances already added are counted again if it changes."""
        before = len(self._case_refs), len(self._case_hyps)
        self._case_refs.update(w for ref in refs for w in ref)
        self._case_hyps.update(w for words in hyps for w in words)
        if self.ignore_case is not None and (len(self._case_refs), len(self._case_hyps)) == before:
            return  # no new word: the same decision
        decided = case_differs([self._case_refs], [self._case_hyps])
        if decided != self.ignore_case:
            self.ignore_case = decided
            for utt in self.utterances:
                self._counted(utt)

    def _counted(self, utt: _Utterance) -> _Utterance:
        """``utt`` with its word errors counted under :attr:`ignore_case`: its first pass's and,
        for a table, every hypothesis's and every distinct word sequence's."""
        ignore_case = bool(self.ignore_case)
        if utt.hyp_words is None:
            assert utt.first_words is not None, utt.key
            utt.first_pass = word_errors(utt.ref, utt.first_words, ignore_case)
            return utt
        utt.errors = [word_errors(utt.ref, w, ignore_case) for w in utt.hyp_words]
        utt.error_counts = numpy.array([e.errors for e in utt.errors])
        distinct = dict.fromkeys(tuple(w) for w in utt.hyp_words)  # in the order of the group ids
        utt.group_errors = numpy.array([word_errors(utt.ref, list(w), ignore_case).errors for w in distinct])
        utt.first_pass = utt.errors[0] if utt.first_words is None else word_errors(utt.ref, utt.first_words,
                                                                                    ignore_case)
        return utt

    def first_pass(self) -> WerStats:
        return _total(u.first_pass for u in self.utterances)

    def oracle(self) -> WerStats | None:
        if any(u.errors is None for u in self.utterances):
            return None
        return _total(min(u.errors, key=lambda s: s.errors) for u in self.utterances if u.errors)

    def choices(self, points: Sequence[dict[str, float]], mbr: bool = False) -> list[list[list[str]]]:
        """Per grid point, the chosen words of every utterance (Viterbi, or MBR with ``mbr``)."""
        out: list[list[list[str]]] = [[] for _ in points]
        cache: dict[float, Tensor] = {}
        for utt in self.utterances:
            vectors = self._vectors(points, utt.acoustic_scale, cache) if utt.hyp_parts is not None else None
            for i, words in enumerate(self._choose(utt, points, vectors, mbr)):
                out[i].append(words)
        return out

    def decisions(self, point: dict[str, float], mbr: bool = False) -> list[tuple[str, list[str], float]]:
        """At one grid point, every utterance's ``(key, chosen words, total score)``: what ``afp
        rescore`` with these weights returns as ``best`` (the score of the chosen hypothesis's
        best path; under MBR the best path of the chosen word sequence)."""
        out = []
        for utt in self.utterances:
            if utt.hyp_parts is not None:
                assert utt.hyp_words is not None and utt.group is not None
                vector = self._vector(point, utt.acoustic_scale)
                scores = utt.hyp_parts @ vector
                (choice,) = self._table_choice(utt, vector.unsqueeze(1), mbr).tolist()
                rows = (utt.group == choice).nonzero().squeeze(1) if mbr else torch.tensor([choice])
                best = int(rows[torch.argmax(scores[rows])])
                out.append((utt.key, list(utt.hyp_words[best]), float(scores[best])))
            else:
                assert utt.scored is not None
                result = rescore_scored(utt.scored, self._options(point, mbr))[0]
                out.append((utt.key, result.best.words, result.best.score))
        return out

    def evaluate(self, points: Sequence[dict[str, float]], mbr: bool = False,
                 mbr_scale: float | None = None) -> numpy.ndarray:
        """Word errors of each grid point summed over the corpus, int ``(P,)`` (Viterbi, or MBR
        with posteriors ``softmax(mbr_scale * total)``, default the options' scale)."""
        if not self.utterances:
            raise ValueError("no utterance to tune on")
        if mbr_scale is not None and mbr_scale != self.options.mbr_scale:
            import dataclasses

            previous, self.options = self.options, dataclasses.replace(self.options, mbr_scale=mbr_scale)
            try:
                return self.evaluate(points, mbr)
            finally:
                self.options = previous
        totals = numpy.zeros(len(points), dtype=numpy.int64)
        cache: dict[float, Tensor] = {}
        for utt in self.utterances:
            if utt.hyp_parts is not None:
                vectors = self._vectors(points, utt.acoustic_scale, cache)
                if mbr:
                    totals += utt.group_errors[self._table_choice(utt, vectors, mbr)]
                else:
                    totals += utt.error_counts[self._table_choice(utt, vectors, mbr)]
            else:
                totals += numpy.array([word_errors(utt.ref, w, bool(self.ignore_case)).errors
                                       for w in self._choose(utt, points, None, mbr)])
        return totals

    def stats_at(self, point: dict[str, float]) -> WerStats:
        """The error breakdown at a point of the joint search (``score:*`` weights included)."""
        return _total(point_stats(self, point))

    def stats(self, point: dict[str, float], mbr: bool = False) -> WerStats:
        """The full error breakdown at one grid point."""
        return _total(word_errors(utt.ref, words, bool(self.ignore_case)) for utt, words in zip(self.utterances,
                                                                       self.choices([point], mbr)[0]))

    def _vectors(self, points: Sequence[dict[str, float]], acoustic_scale: float,
                 cache: dict[float, Tensor]) -> Tensor:
        """float64 ``(C, P)``: the component weights of every grid point (cached per default scale)."""
        if acoustic_scale not in cache:
            cache[acoustic_scale] = torch.stack([self._vector(p, acoustic_scale) for p in points], dim=1)
        return cache[acoustic_scale]

    def _table_choice(self, utt: _Utterance, vectors: Tensor, mbr: bool) -> numpy.ndarray:
        """Per grid point, the chosen row (Viterbi: a hypothesis, the first of equals; MBR: a
        distinct word sequence, among the ``mbr_nbest`` best, as :func:`lattices.rescore.rescore` does)."""
        assert utt.hyp_parts is not None and utt.group is not None
        scores = utt.hyp_parts @ vectors  # (H, P)
        if not mbr:
            return _argmax_first(scores).numpy()
        from lattices.mbr import mbr_choice

        groups = int(utt.group.max()) + 1
        best = torch.full((groups, scores.shape[1]), -math.inf, dtype=scores.dtype)
        best = best.scatter_reduce(0, utt.group.unsqueeze(1).expand_as(scores), scores, reduce="amax")
        if groups > self.options.mbr_nbest:  # MBR weighs the mbr_nbest best distinct sequences
            cut = best.topk(self.options.mbr_nbest, dim=0).values[-1:]
            best = torch.where(best >= cut, best, -math.inf)
        return mbr_choice(best.T, utt.distances, self.options.mbr_scale).numpy()

    def _choose(self, utt: _Utterance, points: Sequence[dict[str, float]], vectors: Tensor | None,
                mbr: bool) -> list[list[str]]:
        if utt.hyp_parts is not None:
            assert utt.hyp_words is not None and vectors is not None
            choice = self._table_choice(utt, vectors, mbr).tolist()
            if mbr:
                distinct = list(dict.fromkeys(tuple(w) for w in utt.hyp_words))
                return [list(distinct[c]) for c in choice]
            return [utt.hyp_words[c] for c in choice]
        assert utt.scored is not None
        return [rescore_scored(utt.scored, self._options(p, mbr))[0].best.words for p in points]

    def _options(self, point: dict[str, float], mbr: bool) -> RescoreOptions:
        import dataclasses

        return dataclasses.replace(self.options.at_point(point), decode="mbr" if mbr else "viterbi")

    def _vector(self, point: dict[str, float], acoustic_scale: float) -> Tensor:
        names = self.names or ()
        return component_vector(names, point_weights(point, self.options.named_weights(names)), acoustic_scale)


def lattice_words(lattice: Any) -> list[str]:
    """The distinct words a lattice uses (epsilon left out), as written."""
    return [lattice.symbols[i] for i in torch.unique(lattice.words).tolist() if i != 0]


def _argmax_first(scores: Tensor) -> Tensor:
    """Per column, the first row with the highest score (the recogniser's order breaks ties)."""
    best = scores.max(dim=0, keepdim=True).values
    rows = torch.arange(scores.shape[0]).unsqueeze(1).expand_as(scores)
    return torch.where(scores == best, rows, scores.shape[0]).min(dim=0).values


def _total(stats: Iterable[WerStats]) -> WerStats:
    total = WerStats.zero()
    for s in stats:
        total = total + s
    return total


def tune(tuner: Tuner, grid: Grid, mbr: bool = False, seed: int = 0) -> dict[str, Any]:
    """Evaluate the grid (Viterbi, and MBR too with ``mbr``); the JSON report of ``afp tune --json``:
    every point's WER, the best point with its significance against the first pass (``seed``: the
    bootstrap's), and ``chosen``, the point ``--save`` writes (the best, named scores included)."""
    points = grid.points()
    ref_words = tuner.first_pass().ref_words
    if ref_words == 0:
        raise ValueError("the references of these utterances hold no words: WER is undefined")
    rows = [{**p, "wer": 100.0 * int(e) / ref_words, "errors": int(e)} for p, e in zip(points, tuner.evaluate(points))]
    if mbr:
        for row, e in zip(rows, tuner.evaluate(points, mbr=True)):
            row.update({"mbr_wer": 100.0 * int(e) / ref_words, "mbr_errors": int(e)})
    best = min(rows, key=lambda r: r["errors"])  # the first of equals: the grid's own order
    oracle = tuner.oracle()
    report: dict[str, Any] = {
        "best": {**{k: best[k] for k in (*GRID_NAMES, "wer")},
                 "errors": tuner.stats({k: best[k] for k in GRID_NAMES}).to_json()},
        "first_pass_wer": tuner.first_pass().wer,
        "oracle_wer": oracle.wer if oracle is not None else None,
        "ignore_case": bool(tuner.ignore_case),
        "utterances": len(tuner.utterances),
        "ref_words": ref_words,
        "score_weights": dict(tuner.options.score_weights),
        "grid": rows,
    }
    from afp.significance import compare

    named = {f"score:{k}": v for k, v in tuner.options.named_weights(tuner.names or ()).items()}
    chosen = {**{k: best[k] for k in GRID_NAMES}, **named}
    first = [u.first_pass.errors for u in tuner.utterances]
    report["best"]["against_first_pass"] = compare(first, utterance_errors(tuner, chosen),
                                                   [u.first_pass.ref_words for u in tuner.utterances], seed=seed).to_json()
    report["chosen"] = {"point": chosen, "reason": "the best grid point", "is_first_pass": False}
    if mbr:
        best_mbr = min(rows, key=lambda r: r["mbr_errors"])
        report["best_mbr"] = {**{k: best_mbr[k] for k in GRID_NAMES}, "wer": best_mbr["mbr_wer"],
                              "mbr_scale": tuner.options.mbr_scale}
    return report


def chosen_weights(tuner: Tuner, report: dict[str, Any], record: dict[str, Any] | None = None) -> Any:
    """The weights file (:class:`afp.weights.TunedWeights`) of a report's chosen point (:func:`tune`,
    :func:`joint_tune`): what ``afp tune --save`` writes, ``record`` kept as its ``tuned`` field."""
    from afp.weights import TunedWeights

    if report["chosen"]["point"] is None:
        raise ValueError(f"no weights to save: {report['chosen']['reason']}")
    return TunedWeights.from_options(tuner.options.at_point(report["chosen"]["point"]), record or {})


def plot(report: dict[str, Any], path: str, title: str = "") -> None:
    """WER against the LM weight, one line per old-LM weight (at the best penalties); a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best = report["best"]
    rows = [r for r in report["grid"] if r["word_penalty"] == best["word_penalty"]
            and r["unk_penalty"] == best["unk_penalty"]]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for old in sorted({r["old_lm_weight"] for r in rows}):
        line = sorted((r for r in rows if r["old_lm_weight"] == old), key=lambda r: r["lm_weight"])
        ax.plot([r["lm_weight"] for r in line], [r["wer"] for r in line], marker="o", label=f"old LM weight {old:g}")
        if "mbr_wer" in line[0]:
            ax.plot([r["lm_weight"] for r in line], [r["mbr_wer"] for r in line], linestyle="--",
                    label=f"MBR, old LM weight {old:g}")
    ax.axhline(report["first_pass_wer"], color="black", linestyle=":", label="first pass")
    if report["oracle_wer"] is not None:
        ax.axhline(report["oracle_wer"], color="grey", linestyle=":", label="oracle")
    ax.set_xlabel("new LM weight")
    ax.set_ylabel("WER (%)")
    ax.set_title(title or "WER against LM weight")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------------------- the joint search
def first_pass_point(tuner: Tuner, restarts: int = 2, seed: int = 0) -> tuple[dict[str, float], float]:
    """The weights that reproduce the recogniser's own choices, and the share of utterances they
    reproduce: the new LM at 0 and, for n-best lists, the named scores' and the old LM's weights
    (and the word penalty) found by the same line searches with the objective "disagree with the
    recogniser's 1-best" (so ESPnet's ``0.6 decoder + 0.4 ctc + 0.6 lm`` is recovered from the
    lists alone); the first named score keeps its given weight (the scale is free). Lattices: the
    named weights as given and the old LM in full, as the first pass scores a lattice."""
    from afp import mert

    names = tuner.names or ()
    named = tuner.options.named_weights(names)
    scores = [n for n in names[: -len(TAIL)] if (n != "acoustic" or "acoustic" in named) and n not in tuner.features]
    start: dict[str, float] = {"lm_weight": 0.0, "old_lm_weight": 1.0, "word_penalty": _first_pass_penalty(tuner),
                               "unk_penalty": tuner.options.unk_penalty or 0.0,
                               **{f"score:{n}": named.get(n, 1.0) for n in scores},
                               **{f"score:{n}": 0.0 for n in tuner.features}}  # the first pass has no features
    tables = [u for u in tuner.utterances if u.hyp_parts is not None]
    if not tables:
        return start, float("nan")
    # the objective: 1 for a hypothesis whose words are not the recogniser's 1-best's
    disagree = {id(u): numpy.array([int(w != _first_pass_words(u)) for w in u.hyp_words]) for u in tables}
    problem = mert.Problem(mert.tables_from(tables, lambda u: disagree[id(u)]), names, named)
    free = ["old_lm_weight", *(f"score:{n}" for n in scores[1:]), "word_penalty"]
    found = mert.search(problem, start, free, restarts=restarts, seed=seed, pick="simplest")
    return found.point, 1.0 - found.errors / len(tables)


def _first_pass_penalty(tuner: Tuner) -> float:
    """The first pass's word penalty: the options', else the lattices' own (an HTK header's
    ``wdpenalty / lmscale``, PocketSphinx's ``ln wip``) when they all have the same, else 0."""
    if tuner.options.word_penalty is not None:
        return tuner.options.word_penalty
    own = {u.scored.default_word_penalty for u in tuner.utterances if u.scored is not None}
    return own.pop() if len(own) == 1 else 0.0


def _first_pass_words(utt: _Utterance) -> list[str]:
    """The recogniser's 1-best words of a table utterance (the first hypothesis)."""
    assert utt.hyp_words is not None
    return utt.hyp_words[0]


def point_stats(tuner: Tuner | _Subset, point: dict[str, float]) -> list[WerStats]:
    """Every utterance's errors at a point of the joint search (``score:*`` weights included):
    the hypothesis rescoring with those weights returns as ``best``."""
    from afp import mert

    names = tuner.names or ()
    out = []
    for utt in tuner.utterances:
        if utt.hyp_parts is not None:
            assert utt.errors is not None
            vector = component_vector(names, point_weights(point, tuner.options.named_weights(names)),
                                      utt.acoustic_scale)
            out.append(utt.errors[int(_argmax_first((utt.hyp_parts @ vector).unsqueeze(1))[0])])
        else:
            assert utt.scored is not None
            words = rescore_scored(utt.scored, tuner.options.at_point(point))[0].best.words
            out.append(word_errors(utt.ref, words, bool(tuner.ignore_case)))
    return out


def weight_vector(scored: ScoredLattice, options: RescoreOptions) -> Tensor:
    """float64 ``(C,)``: the weights rescoring gives ``scored``'s components under ``options``
    (its one LM weight): the vector of :func:`~lattices.rescore.rescore_scored`."""
    (lm_weight,) = options.lm_weights_for(scored)
    return scored.vector(options.weights(lm_weight, scored))


def path_words(scored: ScoredLattice, arcs: Tensor | numpy.ndarray) -> list[str]:
    """The LM-scored words along expanded arcs ``arcs`` (int64 ids, path order)."""
    lattice, expansion = scored.lattice, scored.expansion
    arcs = torch.as_tensor(arcs, dtype=torch.int64).to(expansion.arc_orig.device)
    words = lattice.words[expansion.arc_orig[arcs]][expansion.arc_lm_word[arcs] != PAD]
    return [lattice.symbols[w] for w in words.tolist()]


def lattice_lines(tuner: Tuner, utt: _Utterance) -> Any:
    """The line-search view of a lattice utterance (:class:`afp.mert.LatticeLines`), made once and
    kept on it: the paths its line searches meet serve every later search, restart and fold."""
    from afp import mert

    if utt.lines is None:
        scored, options, ignore_case = utt.scored, tuner.options, bool(tuner.ignore_case)
        assert scored is not None
        known: dict[tuple[str, ...], int] = {}

        def errors_of(arcs: numpy.ndarray) -> int:
            words = tuple(path_words(scored, arcs))
            if words not in known:
                known[words] = word_errors(utt.ref, list(words), ignore_case).errors
            return known[words]

        utt.lines = mert.LatticeLines(
            scored.dag(weight_vector(scored, options)), scored.arc_parts.cpu().numpy(),
            scored.final_parts.cpu().numpy(), tuner.point_vectors(scored), errors_of)
    return utt.lines


def utterance_errors(tuner: Tuner | _Subset, point: dict[str, float]) -> list[int]:
    """Word errors of every utterance at a point (:func:`point_stats`)."""
    return [stats.errors for stats in point_stats(tuner, point)]


def mert_problem(tuner: Tuner, utterances: Sequence[_Utterance]) -> Any:
    """The line-search problem (:class:`afp.mert.Problem`) of ``utterances`` of ``tuner``: table
    utterances by their error counts, the others by their lattices' envelopes (:func:`lattice_lines`)."""
    from afp import mert

    names = tuner.names or ()
    tables = [u for u in utterances if u.hyp_parts is not None]
    others = [lattice_lines(tuner, u) for u in utterances if u.hyp_parts is None]
    return mert.Problem(mert.tables_from(tables, lambda u: u.error_counts), names,
                        tuner.options.named_weights(names), others)


def joint_tune(tuner: Tuner, tune_scores: Sequence[str] = (), restarts: int = 3, folds: int = 5, seed: int = 0,
               progress: bool = False, baseline: Mapping[str, Sequence[str]] | None = None,
               fold_restarts: int = 0) -> dict[str, Any]:
    """Search every weight jointly (:mod:`afp.mert`) from the first pass's own point; the JSON
    report of ``afp tune --json``.

    Coordinates: ``lm_weight``, ``old_lm_weight``, ``word_penalty``, ``unk_penalty``, the
    named scores of ``tune_scores`` and the tuner's features (acausal window models, from 0). The search starts at :func:`first_pass_point`, so the tuned
    WER on the tuning set is never above that point's. Reported: the first pass's WER (its 1-best),
    the start point's, the tuned point's and its significance against the first pass; the
    cross-validated WER (``folds``-fold: each fold decoded with the weights tuned on the others,
    from the same start) with its significance, which is what the tuned weights can be expected
    to give on new data; and the coordinates that ended at an edge of their range. A fold's search
    runs from the same start with ``fold_restarts`` random restarts (default none: on the
    PocketSphinx dev sets the folds' restarts took a third to two thirds of the search and did not
    change which point was chosen; the estimate without them was 0.7 points higher on dev_clean
    and 0.06 lower on dev_other, ``bench/results/tune_speed.json``).

    ``chosen`` is what ``afp tune --save`` writes: the tuned point, unless its cross-validated WER
    is not below the first pass's (tuning over-fitted the dev set, or the new model adds
    nothing): then the first pass's own weights, so that applying the saved weights cannot be
    expected to do worse than the recogniser did."""
    import time

    from tqdm import tqdm

    from afp import mert
    from afp.significance import compare

    if not tuner.utterances:
        raise ValueError("no utterance to tune on")
    names = tuner.names or ()
    unknown = sorted(set(tune_scores) - set(names[: -len(TAIL)]))
    if unknown:
        raise ValueError(f"--tune-score-weights: no score named {', '.join(unknown)}; the scores are "
                         f"{', '.join(names[: -len(TAIL)])}")
    coords = [*mert.BASE, *(f"score:{n}" for n in dict.fromkeys([*tune_scores, *tuner.features]))]
    started = time.perf_counter()
    start, agreement = first_pass_point(tuner, seed=seed)
    bar = tqdm(desc="tuning (line searches)", unit="search", disable=not progress)
    problem = mert_problem(tuner, tuner.utterances)
    found = mert.search(problem, start, coords, restarts=restarts, seed=seed, on_step=lambda: bar.update())
    first = [u.first_pass.errors for u in tuner.utterances]
    ref_words = [u.first_pass.ref_words for u in tuner.utterances]
    tuned = utterance_errors(tuner, found.point)
    cv = _cross_validated(tuner, start, coords, fold_restarts, folds, seed, bar) if folds > 1 else None
    bar.close()
    seconds = time.perf_counter() - started
    total_words = sum(ref_words)
    report: dict[str, Any] = {
        "method": "coordinate descent with exact line searches (MERT) from the first pass's point, "
                  f"{restarts} random restarts",
        "utterances": len(tuner.utterances), "ref_words": total_words,
        "first_pass_wer": 100.0 * sum(first) / total_words,
        "ignore_case": bool(tuner.ignore_case),
        "start": {"point": start, "wer": 100.0 * found.start_errors / total_words,
                  "reproduces_first_pass": agreement},
        "best": {**found.point, "wer": 100.0 * sum(tuned) / total_words,
                 "errors": tuner.stats_at(found.point).to_json(),
                 "against_first_pass": compare(first, tuned, ref_words, seed=seed).to_json()},
        "at_edge": found.at_edge,
        "line_searches": found.line_searches, "seconds": seconds,
        "evaluations_per_second": problem.evaluations / seconds if seconds > 0 else None,
        "score_weights": {k[6:]: v for k, v in found.point.items() if k.startswith("score:")},
        "oracle_wer": (tuner.oracle().wer if tuner.oracle() is not None else None),
    }
    chosen, reason = found.point, "the tuned weights"
    if cv is not None:
        report["cross_validated"] = {"folds": folds, "fold_restarts": fold_restarts,
                                     "wer": 100.0 * sum(cv) / total_words,
                                     "against_first_pass": compare(first, cv, ref_words, seed=seed).to_json()}
        if sum(cv) >= sum(first):
            chosen, reason = start, ("the first pass's own weights: the cross-validated WER is not below the first "
                                     "pass's, so the tuned weights would not be expected to help on new data")
    elif sum(tuned) > sum(first):
        chosen, reason = start, "the first pass's own weights: the tuned weights are worse than the first pass"
    report["chosen"] = {"point": chosen, "reason": reason, "is_first_pass": chosen is start}
    if baseline is not None:
        _against_baseline(tuner, report, baseline, seed)
    return report


def _against_baseline(tuner: Tuner, report: dict[str, Any], baseline: Mapping[str, Sequence[str]], seed: int) -> None:
    """The baseline's WER (a recogniser's own 1-best, ``afp tune --baseline hyp.trn``, which the
    lattices alone may not reproduce: PocketSphinx's 1-best comes from its trigram, the lattice's
    first pass from a bigram) and the chosen point against it on this dev set; no point is
    chosen when the chosen one is worse than the baseline here (``--save`` then writes nothing)."""
    from afp.significance import compare

    missing = [u.key for u in tuner.utterances if u.key not in baseline]
    if missing:
        raise ValueError(f"the baseline has no hypothesis for {len(missing)} utterance(s), e.g. {missing[0]!r}")
    base = [word_errors(u.ref, list(baseline[u.key]), bool(tuner.ignore_case)).errors for u in tuner.utterances]
    chosen = report["chosen"]
    at_chosen = utterance_errors(tuner, chosen["point"])
    words = [u.first_pass.ref_words for u in tuner.utterances]
    total = sum(words)
    report["baseline"] = {"wer": 100.0 * sum(base) / total, "chosen_wer": 100.0 * sum(at_chosen) / total,
                          "chosen_against_baseline": compare(base, at_chosen, words, seed=seed).to_json()}
    if sum(at_chosen) > sum(base):
        report["chosen"] = {"point": None, "is_first_pass": False,
                            "reason": f"none: the chosen point's WER on this dev set ({100.0 * sum(at_chosen) / total:.2f}%) "
                                      f"is above the baseline's ({100.0 * sum(base) / total:.2f}%)"}


def _cross_validated(tuner: Tuner, start: dict[str, float], coords: Sequence[str], restarts: int, folds: int,
                     seed: int, bar: Any) -> list[int]:
    """Each utterance's errors with the weights tuned on the other folds (utterance ``i`` is in
    fold ``i % folds``)."""
    from afp import mert

    errors = [0] * len(tuner.utterances)
    for fold in range(folds):
        train = [u for i, u in enumerate(tuner.utterances) if i % folds != fold]
        held = [i for i in range(len(tuner.utterances)) if i % folds == fold]
        if not train or not held:
            continue
        found = mert.search(mert_problem(tuner, train), start, coords, restarts=restarts, seed=seed,
                            on_step=lambda: bar.update())
        at_point = utterance_errors(_Subset(tuner, [tuner.utterances[i] for i in held]), found.point)
        for i, e in zip(held, at_point):
            errors[i] = e
    return errors


class _Subset:
    """A tuner's view of some of its utterances (for :func:`utterance_errors`)."""

    def __init__(self, tuner: Tuner, utterances: list[_Utterance]) -> None:
        self.names, self.options, self.utterances = tuner.names, tuner.options, utterances
        self.ignore_case = tuner.ignore_case
