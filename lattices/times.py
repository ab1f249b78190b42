"""Word times of a path through a lattice, from what the lattice's format kept.

Two sources of time are known (each format module documents what it keeps):

* HTK SLF node times ``t=`` (:mod:`lattices.formats.htk`: ``state_extra["time"]``, float64
  ``(S,)`` seconds, NaN where a node has none): a word on arc ``a`` starts at the time of
  ``src[a]`` and ends at the time of ``dst[a]`` (a node's time is the end of the words entering it).
* Kaldi ``CompactLattice`` transition ids (:mod:`lattices.formats.kaldi`:
  ``arc_extra["kaldi_tids"]``, one ``"12_12_15"`` string per arc): every transition id is one
  frame, so an arc lasts as many frames as it has ids and a word starts after the frames of
  every arc before it on the path (epsilon and silence arcs included). Seconds are frames times
  ``frame_shift`` (0.01 s for most models; Kaldi chain models with frame subsampling factor 3
  use 0.03). Times are exact for word-aligned lattices (``lattice-align-words`` or
  ``lattice-align-words-lexicon``); in a lattice straight from a decoder a word's transition
  ids may spill into its neighbours' arcs, as they do for Kaldi's own ``nbest-to-ctm``.

* Kaldi ``Lattice`` (transducer) input labels (``arc_extra["kaldi_ilabel"]``, int64 ``(A,)``):
  an arc with a transition id (not 0) is one frame. Words are grouped as Kaldi's conversion to a
  ``CompactLattice`` groups them: a word lasts from its own arc up to the next word arc of the
  path (the epsilon-output arcs after it are its frames), and the frames before the first word
  belong to no word. Where the decoding graph put a word's label inside its frames, its start
  is late by those frames: align the lattice (``lattice-align-words``) for exact times.

OpenFst, k2, JSON lattices and n-best lists carry no word times: :func:`path_word_times` raises
:class:`NoWordTimes` for them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from lattices.lattice import Lattice

#: seconds per Kaldi frame (``--frame-shift``): 0.01 for most models
DEFAULT_FRAME_SHIFT = 0.01

__all__ = ["NoWordTimes", "path_word_times"]


class NoWordTimes(ValueError):
    """The lattice does not say when its words were spoken (or not for every word of a path)."""


def path_word_times(lattice: Lattice, path: Sequence[int], word_arcs: Sequence[int],
                    frame_shift: float = DEFAULT_FRAME_SHIFT) -> list[tuple[float, float]]:
    """``(start, duration)`` in seconds of each arc of ``word_arcs`` (in their order), which lie on
    ``path`` (every arc of a start-to-final path, in order, as :class:`~lattices.rescore.Hypothesis`
    gives them). Raises :class:`NoWordTimes` when the lattice has no times, when a word's node
    has no ``t=``, or when a Kaldi path with words has no transition ids at all (a lattice written
    without them; every time would be 0)."""
    if frame_shift <= 0 or not math.isfinite(frame_shift):
        raise ValueError(f"frame_shift must be a positive number of seconds, got {frame_shift}")
    if "time" in lattice.state_extra:
        return _node_times(lattice, word_arcs)
    if "kaldi_tids" in lattice.arc_extra:
        return _frame_times(lattice, path, word_arcs, frame_shift)
    if "kaldi_ilabel" in lattice.arc_extra:
        return _frame_times(lattice, path, word_arcs, frame_shift, _transducer_frames(lattice, path))
    raise NoWordTimes(f"lattice {lattice.key!r} has no word times: they come from HTK node times (t=) or from a "
                      f"Kaldi lattice's transition ids")


def _node_times(lattice: Lattice, word_arcs: Sequence[int]) -> list[tuple[float, float]]:
    times = lattice.state_extra["time"].cpu().tolist()
    src, dst = lattice.src.cpu().tolist(), lattice.dst.cpu().tolist()
    out = []
    for arc in word_arcs:
        start, end = times[src[arc]], times[dst[arc]]
        if math.isnan(start) or math.isnan(end):
            node = src[arc] if math.isnan(start) else dst[arc]
            raise NoWordTimes(f"lattice {lattice.key!r}: node {node} (word {lattice.word(arc)!r}) has no time (t=)")
        out.append((start, end - start))
    return out


def _compact_frames(lattice: Lattice, path: Sequence[int]) -> list[int]:
    """Frames of each arc of ``path`` in a CompactLattice: its number of transition ids."""
    tids = lattice.arc_extra["kaldi_tids"]
    return [len(tids[arc].split("_")) if tids[arc] else 0 for arc in path]


def _transducer_frames(lattice: Lattice, path: Sequence[int]) -> list[int]:
    """Frames of each arc of ``path`` in a Lattice, grouped as a CompactLattice would have them:
    a word arc gets its own frame and those of the epsilon-output arcs after it up to the next
    word arc; epsilon arcs get the frames before the first word (and 0 once they are grouped)."""
    ilabels, words = lattice.arc_extra["kaldi_ilabel"].cpu().tolist(), lattice.words.cpu().tolist()
    frames, owner = [0] * len(path), 0
    for i, arc in enumerate(path):
        if words[arc] != 0:
            owner = i
        frames[owner] += int(ilabels[arc] != 0)
    return frames


def _frame_times(lattice: Lattice, path: Sequence[int], word_arcs: Sequence[int], frame_shift: float,
                 counts: Sequence[int] | None = None) -> list[tuple[float, float]]:
    """Times from per-arc frame counts along ``path`` (default: a CompactLattice's transition ids)."""
    counts = _compact_frames(lattice, path) if counts is None else counts
    starts, frames = {}, 0
    for arc, count in zip(path, counts):
        starts[arc] = (frames, count)
        frames += count
    if frames == 0 and word_arcs:
        raise NoWordTimes(f"lattice {lattice.key!r} has no transition ids on its best path, so no word times "
                          "(was it written without alignments?)")
    out = []
    for arc in word_arcs:
        if arc not in starts:
            raise ValueError(f"word arc {arc} is not on the path {list(path)}")
        first, count = starts[arc]
        out.append((first * frame_shift, count * frame_shift))
    return out
