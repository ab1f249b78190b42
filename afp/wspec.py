"""Where batch outputs go: Kaldi-style write specifiers, and the byte streams they open.

A write specifier (Kaldi's ``wspecifier`` and ``wxfilename``) is one of::

  PATH                       a file; a name ending in ``.gz`` is gzip-compressed
  -                          standard output
  | COMMAND                  a shell command reading the output on its standard input
                             (``| gzip -c > lat.gz``), run with ``sh -c`` as Kaldi runs it
  ark,t:TARGET               a Kaldi *text* archive written to TARGET (any of the three above)
  ark:TARGET  (ark,b:)       a Kaldi *binary* archive written to TARGET

Kaldi's ``f``/``nf`` (flush) options are accepted after ``ark`` and change nothing (every
stream is flushed after each lattice); ``p`` (permissive) and ``scp`` are read-side or
index-file options and are refused, as is any other prefix before a ``:`` that looks like one
(``scp:x``, ``ark,scp:a,b``). A command's exit status is checked when the stream is closed;
a failing command is an :class:`OutputError` naming it, with the end of its standard error.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = ["ByteStream", "OutputError", "WriteSpec"]

_FLUSH_OPTIONS = frozenset({"f", "nf"})
_KNOWN_PREFIXES = frozenset({"ark", "scp", "b", "t", "f", "nf", "p", "o", "s", "cs"})


class OutputError(ValueError):
    """An output that cannot be written: a bad specifier, an unwritable path, a failing command."""


@dataclass(frozen=True)
class WriteSpec:
    """A parsed write specifier.

    ``kind``: ``"file"``, ``"stdout"`` or ``"pipe"``; ``target``: the path or the command;
    ``archive``: None for a plain target, ``"text"`` (``ark,t:``) or ``"binary"`` (``ark:``);
    ``text``: the specifier as given (for messages)."""

    kind: str
    target: str
    archive: str | None
    text: str

    @classmethod
    def parse(cls, text: str, option: str = "--out") -> WriteSpec:
        """Parse ``text``; a bad specifier is an :class:`OutputError` that names ``option``."""
        body, archive = text, None
        head, colon, rest = text.partition(":")
        options = [o.strip() for o in head.split(",")] if colon else []
        if colon and all(o in _KNOWN_PREFIXES for o in options):
            if options[0] != "ark" or "scp" in options:
                raise OutputError(f"{option} {text!r}: only archives (ark:FILE, ark,t:FILE) can be written; "
                                  "scp: (script files) and other specifiers are not supported")
            rest_options = set(options[1:])
            unknown = rest_options - {"t", "b"} - _FLUSH_OPTIONS
            if unknown or {"t", "b"} <= rest_options:
                raise OutputError(f"{option} {text!r}: unsupported archive options {','.join(options[1:])}; "
                                  "expected ark:TARGET (binary) or ark,t:TARGET (text)")
            body, archive = rest, "text" if "t" in rest_options else "binary"
        stripped = body.strip()
        if not stripped:
            raise OutputError(f"{option} {text!r}: no file, '-' or '| command' given")
        if stripped == "-":
            return cls("stdout", "-", archive, text)
        if stripped.startswith("|"):
            command = stripped[1:].strip()
            if not command:
                raise OutputError(f"{option} {text!r}: the pipe has no command")
            return cls("pipe", command, archive, text)
        return cls("file", stripped, archive, text)

    @property
    def gzipped(self) -> bool:
        """A file whose name ends in ``.gz`` is written gzip-compressed."""
        return self.kind == "file" and self.target.endswith(".gz")

    def for_rank(self, rank: int) -> WriteSpec:
        """The specifier of one rank of a job that runs as several processes: a file gets
        ``.RANK`` before any ``.gz`` (``lat.ark.gz`` -> ``lat.ark.1.gz``). Standard output and
        commands cannot be split that way: an :class:`OutputError`."""
        if self.kind != "file":
            raise OutputError(f"{self.text!r}: every rank of this job would write to the same "
                              f"{'standard output' if self.kind == 'stdout' else 'command'}; give a file (each "
                              "rank adds .RANK to its name) or run the ranks with --shard i/n")
        stem, gz = (self.target[:-3], ".gz") if self.gzipped else (self.target, "")
        target = f"{stem}.{rank}{gz}"
        prefix = self.text[: len(self.text) - len(self.target)] if self.text.endswith(self.target) else ""
        return WriteSpec("file", target, self.archive, prefix + target)

    def open(self) -> ByteStream:
        """Open the stream now (so that an unwritable path or a bad command fails before any work)."""
        return ByteStream(self)


class ByteStream:
    """A binary output stream of a :class:`WriteSpec`: ``write(bytes)``, then ``close()``, which
    checks a command's exit status (``abort()`` closes without raising, after another error)."""

    def __init__(self, spec: WriteSpec) -> None:
        self.spec = spec
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr = None
        if spec.kind == "stdout":
            sys.stdout.flush()
            self._stream: BinaryIO = sys.stdout.buffer
        elif spec.kind == "pipe":
            self._stderr = tempfile.TemporaryFile()
            self._process = subprocess.Popen(spec.target, shell=True, stdin=subprocess.PIPE, stderr=self._stderr)
            assert self._process.stdin is not None
            self._stream = self._process.stdin
        else:
            path = Path(spec.target)
            try:
                if path.parent != Path(""):
                    path.parent.mkdir(parents=True, exist_ok=True)
                raw = path.open("wb")
            except OSError as err:
                raise OutputError(f"{spec.text}: cannot write: {err.strerror or err}") from None
            self._stream = gzip.GzipFile(fileobj=raw, mode="wb", filename="") if spec.gzipped else raw
            self._raw = raw

    def write(self, data: bytes) -> None:
        try:
            self._stream.write(data)
            if self.spec.kind != "file":
                self._stream.flush()  # a reader downstream gets each lattice as it is done
        except BrokenPipeError:
            if self._process is None:
                raise  # standard output closed early: the CLI stops quietly
            self._fail("stopped reading its input")
        except OSError as err:
            raise OutputError(f"{self.spec.text}: cannot write: {err.strerror or err}") from None

    def close(self) -> None:
        """Finish the stream; a command that failed is an :class:`OutputError`."""
        if self.spec.kind == "stdout":
            self._stream.flush()
            return
        try:
            self._stream.close()
            if self.spec.gzipped:
                self._raw.close()
        except BrokenPipeError:
            pass  # the command's status says why
        except OSError as err:
            raise OutputError(f"{self.spec.text}: cannot write: {err.strerror or err}") from None
        if self._process is not None and self._process.wait() != 0:
            self._fail("failed")
        self._close_stderr()

    def abort(self) -> None:
        """Close after another error: a command gets end-of-file and is waited for; nothing is raised."""
        try:
            if self.spec.kind == "stdout":
                return
            self._stream.close()
            if self.spec.gzipped:
                self._raw.close()
        except OSError:
            pass
        if self._process is not None:
            self._process.wait()
        self._close_stderr()

    def _fail(self, what: str) -> None:
        assert self._process is not None and self._stderr is not None
        try:
            self._stream.close()
        except OSError:
            pass
        status = self._process.wait()
        self._stderr.seek(0)
        tail = self._stderr.read()[-500:].decode("utf-8", errors="replace").strip()
        self._close_stderr()
        what = "failed" if status != 0 else what
        raise OutputError(f"{self.spec.text}: command {self.spec.target!r} {what} (exit status {status})"
                          + (f": {tail}" if tail else ""))

    def _close_stderr(self) -> None:
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
