"""The engine's options: :class:`RescoreOptions`, its one set of defaults, and the table of what the
doors show of it (:data:`OPTIONS`).

Every door (``afp rescore`` / ``afp tune`` / ``afp rescore-cuts``, ``POST /v1/rescore``,
:meth:`afp.Model.rescore`) builds its options with :func:`afp.options.build_options`, which starts
from ``RescoreOptions()``'s defaults. :data:`OPTIONS` describes each option once, an
:class:`OptionSpec`: its name at the doors (request field, flag, keyword), what it takes and its
bounds, its help text. ``RescoreOptions`` checks every value against its spec, the HTTP request
schema (:mod:`service.schemas`) and the command-line flags (:mod:`service.cli`) are generated from
the same specs, and their defaults are ``RescoreOptions``' own: a limit cannot differ between the
engine and a door, and a new option is a field of ``RescoreOptions`` and a row of :data:`OPTIONS`.

The limits every door shares, and why:

* ``prune_beam`` >= 0 (0 keeps the best paths only, where the auto-pruning's
  beams, :data:`lattices.rescore.AUTO_PRUNE_BEAMS`, end too), a
  finite number, as ``determinize_beam`` and ``mbr_scale``;
* ``mbr_nbest`` 1 to :data:`MAX_MBR_NBEST` (300): MBR aligns every pair of its hypotheses, a cost
  that grows with the square of their number (:mod:`lattices.mbr`);
* ``lm_weights``: 1 to :data:`MAX_LM_WEIGHTS` (32) weights, each a search and a result of every
  lattice (more is a grid search: ``afp tune --grid``).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy

from lattices.expand import DEFAULT_SKIP
from lattices.lattice import Lattice
from lattices.scored import ScoredLattice, Weights, WeightError, default_acoustic_scale, point_weights

__all__ = ["DECODERS", "DEFAULT_DETERMINIZE_BEAM", "DEFAULT_LM_WEIGHT",
           "DEFAULT_MAX_DETERMINIZED_STATES", "DEFAULT_MAX_EXPANDED_ARCS", "DEFAULT_TARGET_EXPANDED_ARCS",
           "DENSE_FACTOR", "DETERMINIZE", "MAX_LM_WEIGHTS", "MAX_MBR_NBEST", "NO_TARGET", "OPTIONS", "OptionSpec",
           "RescoreOptionError", "RescoreOptions", "option_spec"]

#: the front ends' untuned weights (afp rescore, POST /v1/rescore, afp.Model.rescore): the first
#: pass's combination kept whole, as the recogniser weighed it (an n-best list's weights recovered
#: from its totals, :func:`lattices.formats.nbest.first_pass_weights`; else the old LM at 1), and
#: the new LM added at a quarter of the old LM's weight (``lm_weights`` None). Measured on the
#: ESPnet LibriSpeech lists (models/librispeech, bench/results/untuned_defaults.json): the
#: recogniser's combination plus the new LM at 0.5 of its own scale raised WER, at a quarter it
#: stays within noise of the first pass; only tuning (afp tune) says what helps.
DEFAULT_LM_WEIGHT = 0.25
#: the memory limit of every lattice's expansion (arcs) at every door (the server's
#: AFP_MAX_EXPANDED_ARCS; RescoreOptions says what happens over it)
DEFAULT_MAX_EXPANDED_ARCS = 5_000_000
#: the size (arcs) a dense lattice's expansion is made small to at every door (the server's
#: AFP_TARGET_EXPANDED_ARCS): PocketSphinx dev sets, models/librispeech, one thread: 20k arcs gave a
#: rescoring real-time factor of about 0.08, 50k about 0.12 (bench/results, commit 8fdaff3)
DEFAULT_TARGET_EXPANDED_ARCS = 20_000
#: a lattice is dense when its expansion bound is more than this many times its arcs: a
#: PocketSphinx lattice's reaches 1e4 and far more at rho 4, a sparse Kaldi/AMI lattice's at most
#: about 40, a chain's or an n-best list's 1
DENSE_FACTOR = 100
#: the determinization's defaults (lattices.reduce): its pruning beam on the first pass's scores
#: and its state limit. Beam 10, not 15: on PocketSphinx lattices the fit stage keeps a beam of 5-14
#: at the default target, and beam 10 determinizes 41-48% faster (rescoring 32%) with no loss of
#: WER (models/librispeech/afp trained on at rho 4, first 100 utterances of each dev set, tuned on
#: one, applied to the other: 18.11 / 23.86% against 18.75 / 23.92% at beam 15; bench.rho_sweep's
#: runs, bench/results/rho_sweep/rho4*.json)
DEFAULT_DETERMINIZE_BEAM: float | None = 10.0
DEFAULT_MAX_DETERMINIZED_STATES: int | None = 20_000
DETERMINIZE = ("auto", "always", "never")
DECODERS = ("viterbi", "mbr")
#: ``target_expanded_arcs`` at every door (``--target-arcs 0``, ``target_arcs: 0``,
#: ``AFP_TARGET_EXPANDED_ARCS=0``, ``target_arcs=0``): no target, dense lattices expanded whole up to
#: ``max_expanded_arcs`` (stored as None)
NO_TARGET = 0
#: the most LM weights one pass evaluates (each is a search and a result per lattice)
MAX_LM_WEIGHTS = 32
#: the most hypotheses MBR decoding weighs: it aligns every pair of them (:mod:`lattices.mbr`)
MAX_MBR_NBEST = 300


class RescoreOptionError(ValueError):
    """A value :class:`RescoreOptions` refuses: ``field`` names the option (its field name),
    ``expected`` says what it takes, ``value`` is what it got. :meth:`naming` is the same message
    under a door's spelling of the option (``target_arcs`` for ``target_expanded_arcs``)."""

    def __init__(self, field: str, expected: str, value: Any) -> None:
        self.field, self.expected, self.value = field, expected, value
        super().__init__(self.naming(field))

    def naming(self, name: str) -> str:
        """The message with the option called ``name``."""
        return f"{name} must be {self.expected}, got {self.value!r}"


@dataclass(frozen=True)
class RescoreOptions:
    """How to combine scores and what to return. None means "from the lattice header".

    How large an expansion may be: two budgets, in expanded arcs, the same at every door
    (:func:`reduction` decides, from :func:`lattices.expand.expansion_bound`, an upper bound
    computed in milliseconds):

    * ``target_expanded_arcs`` (default :data:`DEFAULT_TARGET_EXPANDED_ARCS`, 20,000; ``--target-arcs``,
      the request field ``target_arcs``, ``AFP_TARGET_EXPANDED_ARCS``): what a **dense** lattice is
      made small to, for speed. Dense: its expansion bound is more than :data:`DENSE_FACTOR` (100)
      times its arcs, as a real decoder's search lattice (PocketSphinx: 1e4 and more at rho 4).
      Over the target it is determinized, minimized and fitted to the target (:mod:`lattices.reduce`),
      and the result says what that kept. Capped by ``max_expanded_arcs``. :data:`NO_TARGET` (0,
      stored as None; every door's spelling: ``--target-arcs 0``, ``target_arcs: 0``,
      ``AFP_TARGET_EXPANDED_ARCS=0``, ``target_arcs=0``) or None: no target, a dense lattice is
      expanded whole, exactly, up to ``max_expanded_arcs``, as every other lattice.
    * ``max_expanded_arcs`` (default :data:`DEFAULT_MAX_EXPANDED_ARCS`, 5,000,000; ``--max-arcs``,
      ``AFP_MAX_EXPANDED_ARCS``): the memory limit of every lattice. Chains, n-best lists and sparse
      lattices (Kaldi, AMI: at most ~40 times their arcs at rho 4) are expanded whole, exactly,
      up to it, never through a reduction they do not need; over it they are reduced to fit it.

    ``auto_prune`` (default on, at every door): when the expansion would exceed its budget, prune to
    fit instead of failing, and report it (``RescoreResult.pruned``: the beam, the budget it had
    to fit, what was kept): the fit stage of :mod:`lattices.reduce`, or, for a lattice that is not
    determinized, the input pruned with beam :data:`AUTO_PRUNE_BEAMS` (10, then halving) until it
    fits. Off (``--no-auto-prune``, ``prune_if_too_large: false``), nothing is pruned to fit a
    budget, the target included: a lattice whose expansion passes ``max_expanded_arcs`` after its
    determinization and minimization fails with :class:`~lattices.expand.ExpansionTooLarge`.
    Whole-number options (``nbest``, ``mbr_nbest``, ``max_kbest_paths``, the budgets,
    ``max_determinized_states``) take any integral number (``int``, ``numpy.int64``...; not a
    bool or a float) and are stored as ``int``; weights take any finite real number and are
    stored as ``float``. A value refused raises :class:`RescoreOptionError` (a weight:
    :class:`~lattices.scored.WeightError`), naming the option. What each option takes, its bounds
    (``mbr_nbest`` at most :data:`MAX_MBR_NBEST`, at most :data:`MAX_LM_WEIGHTS` LM weights,
    beams >= 0...) and its help text are its row of :data:`OPTIONS`, which every door reads too.
    ``deadline``: ``time.monotonic()`` seconds after which the work stops with
    :class:`~lattices.ops.DeadlineExceeded` (checked level by level).
    A hypothesis of an n-best list carries its ``rank`` in the list (1 = the recogniser's best);
    equal scores are ordered by it.
    ``score_weights``: ``w_k`` of named scores (``{"decoder": 0.6, "ctc": 0.4}``); an
    ``acoustic_scale`` sets ``w_acoustic`` unless ``score_weights`` names it.
    ``old_lm_score``: the named score that is the old LM (default ``lm``, else ``graph``).
    ``old_lm_weight`` None: the recogniser's own weight of its LM where the input tells it
    (``meta["first_pass_weights"]``, recovered from an n-best list's totals), else 1; named
    scores that ``score_weights`` leaves out take the recogniser's weights too where known.
    ``lm_weights`` None: the untuned default, :data:`DEFAULT_LM_WEIGHT` times the old LM's
    weight (a quarter of it); given, each is a weight of its own.
    ``unk_penalty`` None: the model's own (:func:`afp.options.build_options` fills it in from the
    model; the engine alone reads None as 0).

    These are the one set of defaults of every door (``afp rescore``, ``afp tune``, ``POST
    /v1/rescore``, :meth:`afp.Model.rescore`, ``afp rescore-cuts``): each builds its options with
    :func:`afp.options.build_options`, which starts from them, and shows them as its defaults
    (:attr:`OptionSpec.default`).
    ``determinize``: ``auto`` (the default) makes a lattice whose expansion could pass its budget
    (above: the target for a dense lattice, else the limit) small first, as
    :mod:`lattices.reduce` says: determinized on words under the first pass's weights (beam
    ``determinize_beam``, default 10; at most ``max_determinized_states`` states, default 20,000),
    minimized, and, with ``auto_prune``, pruned to the largest beam that fits; never for
    ``posteriors`` (they need the log semiring). ``always`` does it for every lattice (to the
    same budget), ``never`` for none.
    ``match_case``: a word the model does not know as written but knows in another case (``the``
    for an upper-case model) is scored as the model spells it (:mod:`lattices.case`); results
    keep the input's spellings.
    ``decode``: ``viterbi`` or ``mbr``; ``mbr_nbest`` distinct hypotheses form MBR's hypothesis and
    evidence space, with posteriors ``softmax(mbr_scale * total)``.
    ``max_kbest_paths``: the n-best search (:mod:`lattices.kbest`) expands at most
    ``max_kbest_paths * S`` (state, word prefix) nodes of the ``S``-state expanded lattice, on
    average that many partial word sequences per state; None: the number of hypotheses it looks
    for (``nbest``, ``mbr_nbest`` for MBR, every hypothesis of an n-best list). Where it stops
    early, the result has fewer hypotheses (still the best ones, in order) and its
    ``nbest_complete`` is false; the best path is always found.
    """

    lm_weights: tuple[float, ...] | None = None
    acoustic_scale: float | None = None
    old_lm_weight: float | None = None
    word_penalty: float | None = None
    nbest: int = 1
    max_expanded_arcs: int | None = DEFAULT_MAX_EXPANDED_ARCS
    target_expanded_arcs: int | None = DEFAULT_TARGET_EXPANDED_ARCS
    prune_beam: float | None = None
    posteriors: bool = False
    return_lattice: bool = False
    skip_words: frozenset[str] = DEFAULT_SKIP
    max_kbest_paths: int | None = None
    auto_prune: bool = True
    deadline: float | None = None
    score_weights: tuple[tuple[str, float], ...] = ()
    old_lm_score: str | None = None
    unk_penalty: float | None = None
    decode: str = "viterbi"
    mbr_nbest: int = 100
    mbr_scale: float = 1.0
    match_case: bool = True
    determinize: str = "auto"
    determinize_beam: float | None = DEFAULT_DETERMINIZE_BEAM
    max_determinized_states: int | None = DEFAULT_MAX_DETERMINIZED_STATES


    def __post_init__(self) -> None:
        """Every value checked against its :data:`OPTIONS` spec and stored as the spec says (whole
        numbers as ``int``, weights as ``float``, lists and mappings as tuples); a value refused
        raises :class:`RescoreOptionError` (a weight: :class:`~lattices.scored.WeightError`), naming
        the option."""
        for spec in OPTIONS:
            object.__setattr__(self, spec.field, spec.check(getattr(self, spec.field)))

    def named_weights(self, names: tuple[str, ...]) -> dict[str, float]:
        """``w_k`` given for an input with named scores ``names``: ``score_weights``, and
        ``acoustic_scale`` for a score named ``acoustic`` unless ``score_weights`` names it."""
        named = dict(self.score_weights)
        if self.acoustic_scale is not None and "acoustic" in names:
            named.setdefault("acoustic", self.acoustic_scale)
        return named

    def at_point(self, point: Mapping[str, float]) -> RescoreOptions:
        """These options at a point of ``afp tune``'s search (:func:`lattices.scored.point_weights`:
        ``lm_weight``, ``old_lm_weight``, ``word_penalty``, ``unk_penalty`` and ``score:NAME``
        entries over these options' own named weights), one LM weight, best path only."""
        weights = point_weights(point, dict(self.score_weights))
        return dataclasses.replace(self, lm_weights=(weights.lm_weight,), old_lm_weight=weights.old_lm_weight,
                                   word_penalty=weights.word_penalty, unk_penalty=weights.unk_penalty,
                                   score_weights=tuple(weights.score_weights.items()), decode="viterbi", nbest=1)

    def old_weight(self, scored: ScoredLattice) -> float:
        """The old LM's weight on ``scored``: ``old_lm_weight``, else the recogniser's own, else 1."""
        if self.old_lm_weight is not None:
            return self.old_lm_weight
        old = scored.recogniser_weights()[1]
        return 1.0 if old is None else old

    def lm_weights_for(self, scored: ScoredLattice) -> tuple[float, ...]:
        """The new LM's weights on ``scored``: ``lm_weights``, else :data:`DEFAULT_LM_WEIGHT` times
        the old LM's weight."""
        return self.lm_weights if self.lm_weights is not None else (DEFAULT_LM_WEIGHT * self.old_weight(scored),)

    def weights(self, lm_weight: float, scored: ScoredLattice) -> Weights:
        """The weight setting for one (absolute) LM weight, header defaults filled in."""
        penalty = self.word_penalty if self.word_penalty is not None else scored.default_word_penalty
        named = scored.recogniser_weights()[0]
        return Weights(lm_weight=lm_weight, old_lm_weight=self.old_weight(scored), word_penalty=penalty,
                       unk_penalty=self.unk_penalty or 0.0, score_weights={**named, **self.named_weights(scored.named)})

    def scales_for(self, lattice: Lattice) -> tuple[float, float]:
        """``(acoustic_scale, word_penalty)`` for ``lattice``, header defaults filled in."""
        lmscale = lattice.meta.get("lmscale")
        acoustic = dict(self.score_weights).get("acoustic", self.acoustic_scale)
        if acoustic is None:
            acoustic = default_acoustic_scale(lattice)
        penalty = self.word_penalty
        if penalty is None:
            penalty = float(lattice.meta.get("wdpenalty", 0.0)) / float(lmscale) if lmscale else 0.0
        return acoustic, penalty



# ---------------------------------------------------------------------------- what the doors show
#: what an option takes (:class:`OptionSpec`'s ``kind``):
#: ``weights`` 1 to ``maximum`` weights of a log-probability (finite, >= 0); ``weight`` one of them;
#: ``penalty`` a finite number; ``named_weights`` NAME -> weight; ``count`` a whole number (any
#: integral type; not a bool, not a float) within the bounds; ``number`` a finite number within the
#: bounds; ``switch`` true or false; ``choice`` one of ``choices``; ``name`` a text.
Kind = Literal["weights", "weight", "penalty", "named_weights", "count", "number", "switch", "choice", "name"]
_WEIGHT_KINDS = ("weights", "weight", "penalty", "named_weights")  # refused with WeightError, as lattices.scored does
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def _as_written(name: str) -> str:
    return name


@dataclass(frozen=True)
class OptionSpec:
    """One option of :class:`RescoreOptions` as every door shows it (a row of :data:`OPTIONS`).

    ``name``: the option at the doors: the HTTP request field, the flag ``--name-with-dashes``, the
    keyword of :func:`afp.options.build_options` and :meth:`afp.Model.rescore`. ``field``: its
    ``RescoreOptions`` field. ``kind``: what it takes (:data:`Kind`); ``minimum`` and ``maximum``:
    its bounds, both included (for ``weights``: how many); ``off``: a whole number that stands for
    None (``target_arcs`` 0: no target); ``unit``: what a count counts (its error message says it);
    ``choices``: a ``choice``'s values. ``help``: what it does, naming other options as ``{name}``
    (each door spells them its own way: ``--max-arcs``, ``max_arcs``); ``unset``: what None means
    (None: the option always has a value). ``http``: a field of ``POST /v1/rescore``'s request;
    ``flag``: its command-line flag (``""``: ``--name-with-dashes``; None: none), and ``flag_help``
    the flag's help where the flag does not set the option to what it says (``--keep-case`` turns
    ``match_case`` off). The default is ``RescoreOptions``' own (:attr:`default`)."""

    name: str
    field: str
    kind: Kind
    help: str
    unset: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    off: int | None = None
    unit: str = ""
    choices: tuple[str, ...] = ()
    http: bool = True
    flag: str | None = ""
    flag_help: str | None = None

    @property
    def default(self) -> Any:
        """``RescoreOptions``' default of the option: what every door gives when it is not set."""
        return _DEFAULTS[self.field]

    @property
    def nullable(self) -> bool:
        """Whether None is one of its values (what it means: ``unset``)."""
        return self.unset is not None

    @property
    def flag_name(self) -> str | None:
        """The command-line flag (``--lm-weight``), or None."""
        return None if self.flag is None else self.flag or "--" + self.name.replace("_", "-")

    @property
    def expected(self) -> str:
        """What the option takes, as a refusal says it (``a whole number from 1 to 300``)."""
        lo, hi = self.minimum, self.maximum
        if self.kind == "count":
            if hi is not None:
                text = f"a whole number{' of ' + self.unit if self.unit else ''} from {lo:g} to {hi:g}"
            else:
                text = f"a whole number of {self.unit}, at least {lo:g}" if self.unit else \
                    f"a whole number of at least {lo:g}"
            return text + (f" ({self.off}: {_spelled(self.unset or '', _as_written)})" if self.off is not None else "")
        if self.kind == "number":
            return "a finite number" + (f" >= {lo:g}" if lo is not None else "") + (f" and <= {hi:g}" if hi is not None
                                                                                    else "")
        if self.kind == "choice":
            return f"one of {self.choices}"
        if self.kind == "switch":
            return "true or false"
        if self.kind == "name":
            return "a name (text)"
        return "finite numbers" + ("" if self.kind == "penalty" else ", not negative")

    def describe(self, spell: Callable[[str], str] = _as_written) -> str:
        """The help text, the options it names spelled by ``spell`` (a door's spelling of a door
        name), and what None means where a door can ask for it (``0: no target...``) or where it is
        the default (``unset: ...``). The doors add the default (:attr:`default`) their own way."""
        text = _spelled(self.help, spell)
        if self.unset is not None and self.off is not None:
            return f"{text}; {self.off}: {_spelled(self.unset, spell)}"
        if self.unset is not None and self.default is None:
            return f"{text}; unset: {_spelled(self.unset, spell)}"
        return text

    def check(self, value: Any) -> Any:
        """``value`` as ``RescoreOptions`` stores it (whole numbers as ``int``, numbers as ``float``,
        lists and mappings as tuples; ``off`` as None). Raises :class:`RescoreOptionError` naming
        the field, or for a weight :class:`~lattices.scored.WeightError` naming the door's field."""
        if value is None and self.nullable:
            return None
        if self.kind in _WEIGHT_KINDS:
            return self._weights(value)
        if self.kind == "count":
            if value is None or isinstance(value, (bool, numpy.bool_)) or not isinstance(value, numbers.Integral):
                raise RescoreOptionError(self.field, self.expected, value)
            count = operator.index(value)
            if self.off is not None and count == self.off:
                return None
            if not self._within(count):
                raise RescoreOptionError(self.field, self.expected, value)
            return count
        if self.kind == "number":
            if isinstance(value, bool) or not _finite(value) or not self._within(value):
                raise RescoreOptionError(self.field, self.expected, value)
            return float(value)
        if self.kind == "switch":
            if not isinstance(value, (bool, numpy.bool_)):
                raise RescoreOptionError(self.field, self.expected, value)
            return bool(value)
        if not isinstance(value, str) or self.kind == "choice" and value not in self.choices:
            raise RescoreOptionError(self.field, self.expected, value)
        return value

    def _within(self, value: float) -> bool:
        return (self.minimum is None or value >= self.minimum) and (self.maximum is None or value <= self.maximum)

    def _weights(self, value: Any) -> Any:
        """A weight kind's value checked (finite; not negative but for a penalty; ``weights``: 1 to
        ``maximum`` of them) and stored as floats (``named_weights``: ``(NAME, weight)`` pairs)."""
        if self.kind == "named_weights":
            pairs = tuple(value.items()) if isinstance(value, Mapping) else _pairs(value, self)
            values: tuple[Any, ...] = tuple(w for _, w in pairs)
        elif self.kind == "weights":
            if not isinstance(value, Iterable) or isinstance(value, (str, Mapping)):
                raise WeightError(f"{self.field} must be a list of weights, got {value!r}", self.name)
            values = tuple(value)
        else:
            values = (value,)
        if not all(_finite(v) for v in values):
            raise WeightError(f"{self.field} must be finite numbers, got {values}", self.name)
        negative = [v for v in values if v < 0] if self.kind != "penalty" else []
        if negative:  # a scale on a log-probability: below zero it would prefer the least likely
            raise WeightError(f"{self.field} must not be negative (a weight of a log-probability), got "
                              f"{negative[0]:g}", self.name)
        if self.kind == "weights" and not values:
            raise WeightError(f"{self.field}: give at least one weight", self.name)
        if self.kind == "weights" and self.maximum is not None and len(values) > self.maximum:
            raise WeightError(f"{self.field}: give at most {self.maximum:g} weights, got {len(values)}", self.name)
        if self.kind == "named_weights":
            return tuple((name, float(w)) for name, w in pairs)
        return tuple(float(v) for v in values) if self.kind == "weights" else float(value)


def _finite(value: Any) -> bool:
    return isinstance(value, numbers.Real) and math.isfinite(value)


def _pairs(value: Any, spec: OptionSpec) -> tuple[tuple[Any, Any], ...]:
    """``(NAME, weight)`` pairs of a named-weights value that is not a mapping."""
    try:
        pairs = tuple((name, weight) for name, weight in value)
    except (TypeError, ValueError):
        raise WeightError(f"{spec.field} must be NAME -> weight pairs, got {value!r}", spec.name) from None
    return pairs


def _spelled(text: str, spell: Callable[[str], str]) -> str:
    """``text`` with each ``{name}`` of an option spelled by ``spell``."""
    return _PLACEHOLDER.sub(lambda m: spell(m.group(1)) if m.group(1) in _BY_NAME else m.group(0), text)


#: every option a door shows (``http``, ``flag``; :func:`afp.options.build_options` takes them all),
#: in the order the doors list them
OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("nbest", "nbest", "count", "distinct word sequences to return, best first", minimum=1),
    OptionSpec("lm_weight", "lm_weights", "weights",
               f"the new LM's weight; several (at most {MAX_LM_WEIGHTS}) are evaluated in one pass, sharing one "
               f"expansion and one scoring", maximum=MAX_LM_WEIGHTS,
               unset=f"the untuned default, {DEFAULT_LM_WEIGHT:g} times the old LM's weight"),
    OptionSpec("old_lm_weight", "old_lm_weight", "weight",
               "the old (first-pass) LM's weight: 0 replaces it, 1 keeps it",
               unset="the recogniser's own weight of its LM where the input tells it (an n-best list's totals), else "
                     "1; named scores that {score_weights} leaves out take the recogniser's weights too"),
    OptionSpec("acoustic_scale", "acoustic_scale", "weight", "the weight of a score named acoustic",
               unset="1/lmscale from an HTK header, 1 for k2 lattices, else 0.1"),
    OptionSpec("word_penalty", "word_penalty", "penalty", "added per LM word",
               unset="wdpenalty/lmscale from an HTK header, else 0"),
    OptionSpec("prune_beam", "prune_beam", "number", "prune the input to this beam (on its first-pass scores) first",
               minimum=0, unset="no pruning"),
    OptionSpec("target_arcs", "target_expanded_arcs", "count",
               f"the expansion (arcs) a dense lattice (a decoder's search lattice: its expansion bound over "
               f"{DENSE_FACTOR} times its arcs) is made small to, for speed: determinize, minimize, prune to fit; at "
               f"most {{max_arcs}}", minimum=1, off=NO_TARGET, unit="expanded arcs",
               unset="no target, dense lattices expanded whole up to {max_arcs}"),
    OptionSpec("max_arcs", "max_expanded_arcs", "count",
               "the memory limit of every lattice's expansion (arcs): chains, n-best lists and sparse lattices are "
               "expanded whole up to it, a lattice over it is made small to fit", minimum=1, unit="expanded arcs",
               unset="no limit", http=False),
    OptionSpec("prune_if_too_large", "auto_prune", "switch",
               "when an expansion would pass its budget, prune to fit and report it (pruned); off: fail instead, and "
               "a dense lattice is not pruned to {target_arcs}", flag="--auto-prune"),
    OptionSpec("determinize", "determinize", "choice",
               "make a lattice small before expanding it (determinize on words, minimize): auto when its expansion "
               "could pass its budget, always, or never", choices=DETERMINIZE),
    OptionSpec("determinize_beam", "determinize_beam", "number",
               "the determinization's pruning beam on the first pass's scores", minimum=0, unset="no beam"),
    OptionSpec("posteriors", "posteriors", "switch",
               "word posteriors of the best path, one per word (best.word_posteriors; the CTM confidence)"),
    OptionSpec("return_lattice", "return_lattice", "switch", "return the rescored lattice, in the input's format",
               flag=None),
    OptionSpec("score_weights", "score_weights", "named_weights",
               "weights of named first-pass scores (decoder 0.6, ctc 0.4); a score left out weighs 1 ({acoustic_scale} "
               "for acoustic), or the recogniser's own weight where the input tells it"),
    OptionSpec("old_lm_score", "old_lm_score", "name", "the named score that is the old LM", unset="lm, else graph"),
    OptionSpec("unk_penalty", "unk_penalty", "penalty",
               "log-probability added to each word the new LM scores as <unk>",
               unset="the model's own, -log of the distinct training words it maps to <unk> (its default_unk_penalty: "
                     "afp info, GET /v1/models)"),
    OptionSpec("decode", "decode", "choice",
               "viterbi: the best path; mbr: minimum Bayes risk, the least expected word errors among {mbr_nbest} "
               "distinct hypotheses", choices=DECODERS),
    OptionSpec("match_case", "match_case", "switch",
               "a word the model knows only in another case (PocketSphinx's lower-case words for an upper-case model) "
               "is scored as the model spells it, and results keep the input's spellings; off: words are looked up "
               "as written", flag="--keep-case", flag_help="look words up in the model only as written (match_case "
               "off; by default a word the model knows only in another case, such as PocketSphinx's lower-case words "
               "for an upper-case model, is scored as the model spells it; results keep the input's spellings)"),
    OptionSpec("mbr_nbest", "mbr_nbest", "count",
               "distinct hypotheses MBR decoding weighs, aligning every pair of them", minimum=1,
               maximum=MAX_MBR_NBEST),
    OptionSpec("mbr_scale", "mbr_scale", "number", "MBR posteriors: softmax(scale * total score)", minimum=0),
    OptionSpec("max_kbest_paths", "max_kbest_paths", "count",
               "the n-best search expands at most this many (state, word prefix) nodes per state of the expanded "
               "lattice", minimum=1, unset="as many as the hypotheses it looks for", http=False, flag=None),
    OptionSpec("max_determinized_states", "max_determinized_states", "count",
               "the determinization's state limit", minimum=1, unit="states", unset="no limit", http=False, flag=None),
)
_BY_NAME = {spec.name: spec for spec in OPTIONS}
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RescoreOptions)}


def option_spec(name: str) -> OptionSpec:
    """The spec of the option a door calls ``name`` (``target_arcs``) or of the field (``target_expanded_arcs``)."""
    found = _BY_NAME.get(name) or next((s for s in OPTIONS if s.field == name), None)
    if found is None:
        raise KeyError(f"no rescoring option {name!r}")
    return found
