"""The outputs of a batch rescoring job (``afp rescore``), written as each lattice is done.

Each writer takes the results of one lattice (one :class:`~lattices.rescore.RescoreResult` per
LM weight) and writes them at once, so nothing is held until the end of the job (except the
JSON and k2 lattice files, whose single document or ``torch.save`` list is written when the job
ends). Targets are write specifiers (:mod:`afp.wspec`: a path, ``.gz`` compressed, ``-``,
``| command``, ``ark:``/``ark,t:``).

Formats (``KEY`` is the lattice key, words are the LM-scored words: epsilons, ``!NULL``,
``<s>``, ``</s>``, silence and noise symbols are left out):

* transcripts (standard output, ``--text-dir DIR``: ``DIR/LMWT/text`` with ``LMWT`` the LM
  weight as ``%g`` prints it, e.g. ``DIR/0.5/text``)::

      KEY WORD WORD ...

* n-best transcripts (``--nbest-text``), as Kaldi's ``lattice-to-nbest`` + ``nbest-to-linear``
  + ``int2sym.pl`` give them: the i-th best distinct word sequence (1-based) of lattice ``KEY``::

      KEY-1 WORD WORD ...
      KEY-2 WORD ...

* CTM (``--ctm``), as Kaldi's ``nbest-to-ctm`` (+ ``int2sym.pl``) gives it: one line per word of
  the best path, channel ``1``, start and duration in seconds with two decimals
  (:mod:`lattices.times` says where times come from), and with word posteriors (``--posteriors``)
  the word's posterior as its confidence, with four decimals::

      KEY 1 START DURATION WORD [CONFIDENCE]

* lattices (``--out``): a Kaldi archive for ``ark,t:`` (text) and ``ark:`` (binary), otherwise
  the input's format (:func:`lattices.formats.output_format`). Kaldi archives hold words as
  integer ids when the input did or when a symbol table (``--words``) is given, ids of that
  table; a binary archive always does, so it needs the table. HTK and OpenFst lattices are one
  file each: a plain PATH is a directory receiving ``KEY.lat`` / ``KEY.fst.txt``; on standard
  output or a command they follow each other, separated by blank lines.

A lattice that failed is left out of every output (its error goes to standard error), as Kaldi's
tools leave out the utterances they fail on. That holds for a lattice that cannot be *written*
too (a word the ``--words`` table lacks): every output of a lattice is rendered first and written
only when all of them could be (:meth:`JobOutputs.write` raises :class:`LatticeOutputError`, and
nothing of that lattice is written), so the job goes on with the next lattice.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol, TextIO

from collections.abc import Callable

from lattices.lattice import Lattice, LatticeFormatError
from lattices.formats import AUTO as AUTO_FORMAT
from lattices.rescore import DEFAULT_LM_WEIGHT, RescoreResult
from lattices.times import DEFAULT_FRAME_SHIFT, NoWordTimes, path_word_times
from lattices.formats import output_format
from afp.jobs import Failure, write_rescored
from afp.wspec import ByteStream, OutputError, WriteSpec

__all__ = ["CtmWriter", "JobOutputs", "LatticeOutputError", "LatticeWriter", "NbestTextWriter", "OutputError",
           "OutputOptions", "TextDirWriter", "ctm_lines", "nbest_text_lines", "transcript_line"]

#: writes one lattice's rendered output (see :meth:`ResultWriter.render`)
Commit = Callable[[], None]


class LatticeOutputError(ValueError):
    """One lattice's results cannot be written (a word the ``--words`` table lacks...): nothing
    of that lattice was written, and the job may go on. ``key`` names the lattice."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key

#: lattice formats written as one document at the end of the job (no streaming form)
_WHOLE_FILE_FORMATS = ("json", "k2")
_ONE_FILE_EACH = ("htk", "openfst")


# ------------------------------------------------------------------------------- line formats
def transcript_line(key: str, words: Sequence[str]) -> str:
    """``KEY WORD WORD ...`` (just ``KEY`` for no words): a line of a Kaldi ``text`` file."""
    return " ".join([key, *words])


def nbest_text_lines(result: RescoreResult) -> list[str]:
    """``KEY-i WORD ...`` for the i-th hypothesis of ``result.nbest`` (i from 1)."""
    return [transcript_line(f"{result.key}-{i}", h.words) for i, h in enumerate(result.nbest, 1)]


def ctm_lines(result: RescoreResult, frame_shift: float = DEFAULT_FRAME_SHIFT) -> list[str]:
    """``KEY 1 START DURATION WORD [CONFIDENCE]`` per word of ``result.best``; the confidence is
    the word's posterior when the result has posteriors. Raises
    :class:`~lattices.times.NoWordTimes` when the lattice has no word times."""
    best = result.best
    if result.searched is None:
        raise ValueError(f"lattice {result.key!r}: the result does not carry the lattice it searched")
    times = path_word_times(result.searched, best.arcs, best.word_arcs, frame_shift)
    posteriors = result.word_posteriors()
    lines = []
    for i, (word, (start, duration)) in enumerate(zip(best.words, times)):
        line = f"{result.key} 1 {start:.2f} {duration:.2f} {word}"
        lines.append(line if posteriors is None else f"{line} {posteriors[i]:.4f}")
    return lines


# ------------------------------------------------------------------------------- writers
class ResultWriter(Protocol):
    """What :class:`JobOutputs` drives: results in, one lattice at a time, in two steps:
    :meth:`render` turns them into what will be written (raising if they cannot be) and returns
    the step that writes it, so a lattice one output cannot render is written to none."""

    def render(self, results: Sequence[RescoreResult]) -> Commit: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


class _LineWriter:
    """Text lines into a :class:`ByteStream` (UTF-8)."""

    def __init__(self, spec: WriteSpec) -> None:
        self._stream = spec.open()

    def _lines(self, lines: Sequence[str]) -> Commit:
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        return lambda: self._stream.write(data) if data else None

    def close(self) -> None:
        self._stream.close()

    def abort(self) -> None:
        self._stream.abort()


class NbestTextWriter(_LineWriter):
    """``--nbest-text``: :func:`nbest_text_lines` of the (only) LM weight."""

    def render(self, results: Sequence[RescoreResult]) -> Commit:
        return self._lines(nbest_text_lines(results[0]))


class CtmWriter(_LineWriter):
    """``--ctm``: :func:`ctm_lines` of the (only) LM weight."""

    def __init__(self, spec: WriteSpec, frame_shift: float = DEFAULT_FRAME_SHIFT) -> None:
        super().__init__(spec)
        self.frame_shift = frame_shift

    def render(self, results: Sequence[RescoreResult]) -> Commit:
        try:
            lines = ctm_lines(results[0], self.frame_shift)
        except NoWordTimes as err:  # the input has no times: every lattice would fail, so the job stops
            raise OutputError(f"--ctm: {err}") from None
        return self._lines(lines)


class TextDirWriter:
    """``--text-dir DIR``: ``DIR/LMWT/text`` (``text.RANK`` for one rank of a job) per LM weight."""

    def __init__(self, directory: str | Path, lm_weights: Sequence[float], rank: int | None = None) -> None:
        name = "text" if rank is None else f"text.{rank}"
        self.paths = {w: Path(directory) / f"{w:g}" / name for w in lm_weights}
        self._streams: dict[float, ByteStream] = {}
        try:
            for weight, path in self.paths.items():
                self._streams[weight] = WriteSpec("file", str(path), None, str(path)).open()
        except OutputError:
            self.abort()
            raise

    def render(self, results: Sequence[RescoreResult]) -> Commit:
        lines = [(stream, (transcript_line(r.key, r.best.words) + "\n").encode())  # results in lm_weights order
                 for stream, r in zip(self._streams.values(), results)]

        def commit() -> None:
            for stream, line in lines:
                stream.write(line)

        return commit

    def close(self) -> None:
        for stream in self._streams.values():
            stream.close()

    def abort(self) -> None:
        for stream in self._streams.values():
            stream.abort()


class LatticeWriter:
    """``--out``: the rescored lattice of each lattice's first LM weight (see the module docstring).

    ``input_format`` is the job's ``--format`` (``auto``: the format is the first lattice's);
    ``symbols`` the ``--words`` table, for the ids of Kaldi archives."""

    def __init__(self, spec: WriteSpec, input_format: str = AUTO_FORMAT, symbols: Sequence[str] | None = None) -> None:
        self.check(spec, symbols)
        self.spec, self.input_format = spec, input_format
        self.symbols = tuple(symbols) if symbols is not None else None
        self.format = "kaldi" if spec.archive else (
            None if input_format == "auto" else output_format(input_format, None))
        self._stream: ByteStream | None = None
        self._held: list[Lattice] = []
        self._count = 0
        if spec.kind != "file" or self.format == "kaldi":
            self._stream = spec.open()
        else:  # opened at the first lattice, once its format is known: check the place now
            _check_writable(spec)

    @staticmethod
    def check(spec: WriteSpec, symbols: Sequence[str] | None) -> None:
        """An :class:`OutputError` for a target this writer cannot write with these options."""
        if spec.archive == "binary" and symbols is None:
            raise OutputError(f"--out {spec.text!r}: a binary Kaldi archive holds words as integer ids: give their "
                              "symbol table with --words words.txt (or write a text archive, ark,t:FILE)")

    def render(self, results: Sequence[RescoreResult]) -> Commit:
        lattice = results[0].lattice
        if lattice is None:
            raise ValueError("LatticeWriter needs results with their rescored lattice (return_lattice)")
        lattice = lattice.to("cpu")
        fmt = self.format or output_format(self.input_format, lattice)
        if fmt in _WHOLE_FILE_FORMATS:
            return lambda: self._commit(fmt, lambda: self._held.append(lattice))
        if fmt in _ONE_FILE_EACH and self.spec.kind == "file":
            return lambda: self._commit(fmt, lambda: self._write_file(lattice, fmt))
        data = self._bytes(lattice, fmt)  # a word the table lacks fails here, before anything is written
        return lambda: self._commit(fmt, lambda: self._open().write(
            (b"\n" if fmt in _ONE_FILE_EACH and self._count > 1 else b"") + data))

    def _commit(self, fmt: str, write: Commit) -> None:
        self.format = fmt
        self._count += 1
        write()

    def _write_file(self, lattice: Lattice, fmt: str) -> None:
        try:
            write_rescored(self.spec.target, [lattice], fmt)
        except OSError as err:
            raise OutputError(f"--out {self.spec.text}: cannot write: {err}") from None

    def close(self) -> None:
        if self._held:
            from lattices.formats import write_lattices

            self._open().write(write_lattices(self._held, self.format or "json"))
            self._held = []
        if self._stream is not None:
            self._stream.close()

    def abort(self) -> None:
        if self._stream is not None:
            self._stream.abort()

    def _open(self) -> ByteStream:
        if self._stream is None:
            self._stream = self.spec.open()
        return self._stream

    def _bytes(self, lattice: Lattice, fmt: str) -> bytes:
        if self.spec.archive == "binary":
            from lattices.formats.kaldi_binary import write_kaldi_binary

            return write_kaldi_binary([lattice], self.symbols)
        if fmt == "kaldi":
            from lattices.formats.kaldi import write_kaldi

            symbols = self.symbols if self.spec.archive else None  # a plain PATH writes words as read
            return write_kaldi([lattice], symbols=symbols).encode("utf-8")
        from lattices.formats import write_lattices

        return write_lattices([lattice], fmt)


def _check_writable(spec: WriteSpec) -> None:
    """An :class:`OutputError` now if ``spec``'s file could not be created (its folder is made)."""
    path = Path(spec.target)
    parent = path.parent if str(path.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"--out {spec.text}: cannot write: {err.strerror or err}") from None
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise OutputError(f"--out {spec.text}: cannot write: permission denied")


# ------------------------------------------------------------------------------- the job's outputs
@dataclass(frozen=True)
class OutputOptions:
    """What ``afp rescore`` writes, and where (None: not written).

    ``out``: rescored lattices (:class:`LatticeWriter`); ``nbest_text``, ``ctm``: write
    specifiers of the n-best transcripts and the CTM (text: ``ark:`` binary archives are refused);
    ``text_dir``: one transcript per LM weight; ``frame_shift``: seconds per Kaldi frame (CTM);
    ``json``: results as JSON lines on standard output, else transcript lines there (the best
    hypothesis as ``key words``, with ``--nbest N`` the others as ``key-2 words`` ... ``key-N``);
    ``show_first_pass``: the first pass's 1-best after each transcript line."""

    out: str | None = None
    nbest_text: str | None = None
    text_dir: str | None = None
    ctm: str | None = None
    frame_shift: float = DEFAULT_FRAME_SHIFT
    json: bool = False
    show_first_pass: bool = False


class JobOutputs:
    """Every output of one job: validates the options when made, opens the targets on ``with``
    (or :meth:`open`), then :meth:`write` each lattice's results and :meth:`failed` each failure.

    Standard output carries the results (transcript lines, or JSON lines with ``json``) unless
    an output is written there (``--out ark:-``, ``--ctm -``...): then the transcript lines are
    left out, and asking for JSON or first-pass lines there too is an :class:`OutputError`, as
    is a second output on standard output. ``rank``: this process's rank in a job run as several
    processes (torchrun): files get ``.RANK`` (:meth:`WriteSpec.for_rank`). ``results_to``: a text
    stream that takes the result lines instead of standard output (a corpus job's per-input
    results file, :mod:`afp.corpus`)."""

    def __init__(self, options: OutputOptions, *, input_format: str = AUTO_FORMAT, lm_weights: Sequence[float] | None = None,
                 symbols: Sequence[str] | None = None, rank: int | None = None,
                 results_to: TextIO | None = None) -> None:
        self.options, self.input_format, self.symbols, self.rank = options, input_format, symbols, rank
        self.results_to = results_to
        self.lm_weights = tuple(lm_weights or (DEFAULT_LM_WEIGHT,))  # None: the untuned default, one weight
        self.specs: dict[str, WriteSpec] = {}
        for flag, text in (("--out", options.out), ("--nbest-text", options.nbest_text), ("--ctm", options.ctm)):
            if text is not None:
                spec = WriteSpec.parse(text, flag)
                self.specs[flag] = spec.for_rank(rank) if rank is not None else spec
        if "--out" in self.specs:
            LatticeWriter.check(self.specs["--out"], symbols)
        for flag in ("--nbest-text", "--ctm"):
            spec = self.specs.get(flag)
            if spec is not None and spec.archive == "binary":
                raise OutputError(f"{flag} {spec.text!r}: this output is text: give FILE or ark,t:FILE")
            if spec is not None and len(self.lm_weights) > 1:
                raise OutputError(f"{flag} is written for one LM weight, and {len(self.lm_weights)} are given: "
                                  "rescore once per weight (or use --text-dir for a transcript per weight)")
        if "--ctm" in self.specs and not (options.frame_shift > 0 and math.isfinite(options.frame_shift)):
            raise OutputError(f"--frame-shift must be a positive number of seconds, got {options.frame_shift}")
        on_stdout = [flag for flag, spec in self.specs.items() if spec.kind == "stdout"]
        if len(on_stdout) > 1:
            raise OutputError(f"{' and '.join(on_stdout)} would both write to standard output: give one of them a file")
        self.stdout_output = on_stdout[0] if on_stdout else None
        for asked, flag in ((options.json, "--json"), (options.show_first_pass, "--show-first-pass")):
            if asked and self.stdout_output and results_to is None:
                raise OutputError(f"{self.stdout_output} {self.specs[self.stdout_output].text!r} writes to standard "
                                  f"output, where {flag} prints the results: write one of them to a file")
        self.writers: list[ResultWriter] = []

    @property
    def results_on_stdout(self) -> bool:
        """Whether result lines (transcripts or JSON) are printed (on standard output, or to ``results_to``)."""
        return self.stdout_output is None or self.results_to is not None

    def open(self) -> JobOutputs:
        """Open every target (an unwritable one fails now, before any lattice is rescored)."""
        try:
            if "--out" in self.specs:
                self.writers.append(LatticeWriter(self.specs["--out"], self.input_format, self.symbols))
            if "--nbest-text" in self.specs:
                self.writers.append(NbestTextWriter(self.specs["--nbest-text"]))
            if "--ctm" in self.specs:
                self.writers.append(CtmWriter(self.specs["--ctm"], self.options.frame_shift))
            if self.options.text_dir is not None:
                self.writers.append(TextDirWriter(self.options.text_dir, self.lm_weights, self.rank))
        except BaseException:
            self.abort()
            raise
        return self

    def write(self, results: Sequence[RescoreResult]) -> None:
        """One lattice's results (one per LM weight, in ``lm_weights`` order), to every output or
        to none: :class:`LatticeOutputError` when one output cannot take this lattice (nothing
        was written; report it with :meth:`failed` and go on)."""
        try:
            commits = [writer.render(results) for writer in self.writers]
        except LatticeFormatError as err:
            raise LatticeOutputError(results[0].key, str(err)) from None
        if self.results_on_stdout:
            self._print(results)
        for commit in commits:
            commit()

    def failed(self, failure: Failure) -> None:
        """A lattice that could not be rescored: its line on standard output (``KEY<TAB>ERROR``,
        or the JSON error object), where results go there."""
        if self.results_on_stdout:
            print(json.dumps(failure.to_json()) if self.options.json else f"{failure.key}\tERROR",
                  file=self.results_to or sys.stdout, flush=True)

    def close(self) -> None:
        """Finish every output; the first error (a command that failed...) is raised after all are closed."""
        error: BaseException | None = None
        for writer in self.writers:
            try:
                writer.close() if error is None else writer.abort()
            except BaseException as err:  # noqa: BLE001 (re-raised below, after the others are closed)
                error = err
        self.writers = []
        if error is not None:
            raise error

    def abort(self) -> None:
        """Close every output after an error, raising nothing."""
        for writer in self.writers:
            writer.abort()
        self.writers = []

    def __enter__(self) -> JobOutputs:
        return self.open()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()

    def _print(self, results: Sequence[RescoreResult]) -> None:
        several = len(self.lm_weights) > 1
        lines = []
        for result in results:
            if self.options.json:
                lines.append(json.dumps(result.to_json()))
                continue
            prefix = f"{result.lm_weight:g}\t" if several else ""
            lines.append(f"{prefix}{transcript_line(result.key, result.best.words)}")
            for rank, hyp in enumerate(result.nbest[1:], 2):  # --nbest N: Kaldi's n-best keys, key-2 ...
                lines.append(f"{prefix}{transcript_line(f'{result.key}-{rank}', hyp.words)}")
            if self.options.show_first_pass and result.first_pass is not None:
                mark = "=" if result.first_pass.words == result.best.words else "*"
                lines.append(f"{prefix}{transcript_line(mark + result.key, result.first_pass.words)}")
        print("\n".join(lines), file=self.results_to or sys.stdout, flush=True)
