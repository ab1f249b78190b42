"""A PocketSphinx dev set that anyone can rebuild: lattices, 1-best and n-best lists of a real decoder.

The audio is **synthetic** (text-to-speech) unless ``--librivox`` is given: references are read
from an sclite ``trn`` file (``WORDS (utt-id)``), a deterministic subset is spoken by several TTS
voices, made a little harder with sox (tempo, pink noise), and decoded by PocketSphinx 5.1.1's
Python API with ``Decoder(fwdflat=False)`` and every other setting at its default (the wheel's
en-us HMM-GMM acoustic model, 3-gram ``en-us.lm.bin`` and cmudict)::

    .venv/bin/python -m bench.pocketsphinx_set \\
        --ref ../shared/data/nbest/librispeech-espnet/dev_clean/ref_wer.trn --name dev_clean --jobs 1
    .venv/bin/python -m bench.pocketsphinx_set --librivox          # 5 real LibriVox utterances
    .venv/bin/python -m bench.pocketsphinx_set --summarize runs/pocketsphinx/dev_clean

Needs the Python package ``pocketsphinx>=5.1`` (the ``decoder`` extra) and the Debian packages
``sox``, ``flite``, ``festival``, ``festvox-kallpc16k``, ``festvox-kdlpc16k``,
``festvox-us-slt-hts`` (TTS sets) or ``pocketsphinx-testdata`` (``--librivox``).

The set ``OUT`` (default ``runs/pocketsphinx/NAME``, git-ignored) holds:

``wav/UTT.wav``        the decoded audio, 16 kHz mono 16-bit.
``lattices/UTT.slf``   the lattice exactly as ``decoder.get_lattice().write_htk`` writes it.
``hyp.trn``            the decoder's 1-best (``decoder.hyp()``), sclite trn, lower case, no fillers.
``ref.trn``            the references of the same utterances, as in the source (LibriSpeech: upper case).
``nbest/UTT.nbest``    up to ``--nbest`` (50) *distinct* word sequences from ``decoder.nbest()``
                       (PocketSphinx's A* yields the same words many times, through pronunciation
                       variants and fillers; the first, best-scored, of each is kept), as an SRILM
                       ``NBestList1.0`` file (:func:`lattices.formats.nbest.read_srilm_nbest`):
                       ``(score) w1 w2 ...``. The score is the A* path score that PocketSphinx
                       ranks by (acoustic + bestpath-weighted LM, insertion penalties), which it
                       keeps in units of log base 1.0001 shifted right by 10 bits: that is SRILM's
                       *bytelog*, so the file holds it exactly (the Python API hands out
                       ``1.0001 ** score``, from which it is recovered as an integer). The A*
                       gives filler words (silence) the LM's log-zero, so its lists avoid pauses
                       and their top is often worse than ``hyp.trn`` (see :func:`summarize`).
``decoder-lm.ngram.arpa.gz`` the decoder's own 3-gram as ARPA (for ``--old-lm``), read from the binary
                       trie by :mod:`lm.ngram.sphinx` (the decoder's model exactly, quantized values
                       included); the build checks it against ``NGramModel.prob`` (``set.json``: ``decoder_lm``).
``set.json``           the command, versions, the decoder's configuration values that matter for
                       rescoring, and per utterance the voice, tempo, noise, durations and
                       decoding time.

:func:`summarize` reads only those files: first-pass WER, n-best oracle WER (words compared
case-insensitively), real-time factor and lattice sizes; the command adds it to
``bench/results/pocketsphinx_sets.json`` (one entry per set name).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import math
import multiprocessing
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import REPO_ROOT, RESULTS, command_line, shown, write_json

RESULTS_FILE = RESULTS / "pocketsphinx_sets.json"
LIBRIVOX_DIR = Path("/usr/share/pocketsphinx/test/data/librivox")
#: the same five utterances, shipped with the tests (README.md and LICENSE there)
LIBRIVOX_FIXTURES = REPO_ROOT / "tests" / "fixtures" / "librivox"
#: the TTS voices, ``engine:voice``, used round-robin over the subset
VOICES = ("flite:kal16", "flite:awb", "flite:rms", "flite:slt",
          "festival:kal_diphone", "festival:ked_diphone", "festival:cmu_us_slt_arctic_hts")
#: the Debian package that provides each program or festival voice
DEBIAN_PACKAGES = {"sox": "sox", "flite": "flite", "text2wave": "festival", "festival": "festival",
                   "kal_diphone": "festvox-kallpc16k", "ked_diphone": "festvox-kdlpc16k",
                   "cmu_us_slt_arctic_hts": "festvox-us-slt-hts", "librivox": "pocketsphinx-testdata"}
SNRS_DB = (30.0, 25.0)
TEMPO_RANGE = (0.95, 1.10)
NOISE_OFFSET_MAX_S = 60.0
#: decoder configuration values recorded in set.json (read from ``decoder.config``)
CONFIG_KEYS = ("lw", "wip", "pip", "uw", "fillprob", "silprob", "nwpen", "ascale", "bestpath", "bestpathlw",
               "fwdflat", "fwdflatlw", "beam", "wbeam", "pbeam", "lpbeam", "lponlybeam", "maxhmmpf", "maxwpf",
               "topn", "logbase", "samprate", "cmn", "remove_noise")


class MissingTool(RuntimeError):
    """A program, voice or package the set needs is not installed; the message names what to install."""


# ------------------------------------------------------------------------------- choosing
@dataclass(frozen=True)
class Utterance:
    """One reference: its trn id and words, and what is done to its audio (all chosen by seed)."""

    key: str
    words: tuple[str, ...]
    voice: str | None = None          # ``engine:voice``; None for real speech
    tempo: float = 1.0
    snr_db: float | None = None       # pink noise at this SNR (whole-utterance power); None: none
    noise_offset_s: float = 0.0       # where in sox's (fixed-seed) pink noise this utterance's noise starts
    source_wav: str | None = None     # real speech: the wav decoded as it is


def choose_subset(keys: Sequence[str], limit: int, seed: int) -> list[int]:
    """Indices of ``limit`` evenly spaced lines (all when ``limit >= len(keys)``): line
    ``floor((j + u) * n / limit)`` for ``j < limit``, ``u`` in [0, 1) drawn from ``seed``, so the
    subset spans the whole file (LibriSpeech trn files are sorted by speaker)."""
    n = len(keys)
    if limit <= 0:
        raise ValueError(f"--limit must be positive, got {limit}")
    if limit >= n:
        return list(range(n))
    u = random.Random(f"subset:{seed}").random()
    return [int((j + u) * n / limit) for j in range(limit)]


def plan_tts(refs: dict[str, list[str]], limit: int, seed: int, voices: Sequence[str],
             tempo_range: tuple[float, float] = TEMPO_RANGE, snrs_db: Sequence[float] = SNRS_DB) -> list[Utterance]:
    """The subset of ``refs`` (in file order) with a voice (round-robin from a seeded start), a
    tempo (uniform in ``tempo_range``), an SNR (one of ``snrs_db``) and a noise offset each, drawn
    from a generator seeded by ``seed`` and the id."""
    keys = list(refs)
    start = random.Random(f"voices:{seed}").randrange(len(voices))
    plan = []
    for position, index in enumerate(choose_subset(keys, limit, seed)):
        key = keys[index]
        rng = random.Random(f"{seed}:{key}")
        plan.append(Utterance(key=key, words=tuple(refs[key]), voice=voices[(start + position) % len(voices)],
                              tempo=round(rng.uniform(*tempo_range), 2), snr_db=rng.choice(list(snrs_db)),
                              noise_offset_s=round(rng.uniform(0.0, NOISE_OFFSET_MAX_S), 2)))
    return plan


def plan_librivox(directory: Path | None = None) -> list[Utterance]:
    """The real LibriVox utterances of pocketsphinx-testdata (``directory``, by default
    :data:`LIBRIVOX_DIR`, else the copy in :data:`LIBRIVOX_FIXTURES`): ``transcription`` lines
    ``<s> words </s> (id)`` and ``id.wav``; no TTS, no noise."""
    from afp.wer import read_references

    if directory is None:
        directory = LIBRIVOX_DIR if (LIBRIVOX_DIR / "transcription").is_file() else LIBRIVOX_FIXTURES
    transcription = directory / "transcription"
    if not transcription.is_file():
        raise MissingTool(f"{transcription} is missing: apt-get install {DEBIAN_PACKAGES['librivox']}")
    refs = read_references(transcription)
    return [Utterance(key=key, words=tuple(w for w in words if w not in ("<s>", "</s>")),
                      source_wav=str(directory / f"{key}.wav")) for key, words in refs.items()]


# ------------------------------------------------------------------------------- audio
def check_tools(voices: Iterable[str]) -> None:
    """Raise :class:`MissingTool` naming the Debian package for any missing program or voice."""
    parsed = [voice.split(":", 1) for voice in voices]
    for engine, name in parsed:
        if engine not in ("flite", "festival"):
            raise ValueError(f"voice '{engine}:{name}': the engine must be flite or festival")
    for program in sorted({"sox", *("flite" if engine == "flite" else "text2wave" for engine, _ in parsed)}):
        if shutil.which(program) is None:
            raise MissingTool(f"{program} is not installed: apt-get install {DEBIAN_PACKAGES[program]}")
    for engine, name in parsed:
        if engine == "festival" and not list(Path("/usr/share/festival/voices").glob(f"*/{name}")):
            raise MissingTool(f"festival voice {name} is not installed: apt-get install "
                              f"{DEBIAN_PACKAGES.get(name, 'the festvox package of ' + name)}")
        if engine == "flite" and name not in _flite_voices():
            raise MissingTool(f"flite has no voice {name!r} (it has {', '.join(_flite_voices())})")


@cache
def _flite_voices() -> tuple[str, ...]:
    out = subprocess.run(["flite", "-lv"], capture_output=True, text=True, check=True).stdout
    return tuple(out.split(":", 1)[-1].split())


def _run(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed ({' '.join(command)}): {result.stderr.strip()[-500:]}")


def synthesize(text: str, voice: str, out_wav: Path, workdir: Path) -> None:
    """Speak ``text`` (lower-cased) with ``engine:voice`` into ``out_wav`` (the engine's own rate)."""
    engine, name = voice.split(":", 1)
    text_file = workdir / "text.txt"
    text_file.write_text(text.lower() + "\n", encoding="utf-8")
    command = (["flite", "-voice", name, "-f", str(text_file), "-o", str(out_wav)] if engine == "flite" else
               ["text2wave", "-eval", f"(voice_{name})", "-o", str(out_wav), str(text_file)])
    _run(command, f"{command[0]} ({name})")
    if not out_wav.is_file() or out_wav.stat().st_size <= 44:
        raise RuntimeError(f"{voice} wrote no audio for {text[:60]!r}")


def read_wav(path: Path) -> np.ndarray:
    """int16 samples of a 16 kHz mono 16-bit wav (anything else is an error)."""
    with wave.open(str(path)) as w:
        if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (16000, 1, 2):
            raise ValueError(f"{path}: expected 16 kHz mono 16-bit, got {w.getframerate()} Hz, "
                             f"{w.getnchannels()} channels, {8 * w.getsampwidth()} bits")
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def _rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(samples.astype(np.float64) ** 2))) if samples.size else 0.0


def degrade(tts_wav: Path, utt: Utterance, out_wav: Path, workdir: Path) -> dict[str, float]:
    """sox, repeatable mode (``-R``, no dither): to 16 kHz mono 16-bit at ``utt.tempo``, peak
    normalised to -3 dBFS; then pink noise (sox ``synth ... pinknoise``, from ``utt.noise_offset_s``
    on) mixed in at ``utt.snr_db`` (speech power over noise power, whole utterance). Returns the
    noise gain and the clean RMS."""
    clean = workdir / "clean.wav"
    _run(["sox", "-R", "-D", str(tts_wav), "-b", "16", "-c", "1", "-r", "16000", str(clean),
          "tempo", "-s", f"{utt.tempo:g}", "gain", "-n", "-3"], "sox tempo")
    speech = read_wav(clean)
    seconds = speech.size / 16000
    noise = workdir / "noise.wav"
    _run(["sox", "-R", "-D", "-n", "-b", "16", "-c", "1", "-r", "16000", str(noise), "synth",
          f"{utt.noise_offset_s + seconds + 0.1:.4f}", "pinknoise", "trim", f"{utt.noise_offset_s:g}",
          f"{speech.size}s"], "sox pinknoise")
    speech_rms, noise_rms = _rms(speech), _rms(read_wav(noise))
    gain = speech_rms / (noise_rms * 10 ** (utt.snr_db / 20)) if noise_rms > 0 else 0.0
    _run(["sox", "-R", "-D", "-m", "-v", "1", str(clean), "-v", f"{gain:.6f}", str(noise),
          "-b", "16", str(out_wav)], "sox mix")
    return {"noise_gain": gain, "speech_rms": speech_rms}


# ------------------------------------------------------------------------------- decoding
@cache
def make_decoder() -> Any:
    """This process's ``pocketsphinx.Decoder(fwdflat=False)``, everything else at its default
    (:func:`build_set` starts each set with a new one)."""
    from pocketsphinx import Decoder

    return Decoder(fwdflat=False)


def decoder_config(decoder: Any) -> dict[str, Any]:
    """The configuration values of :data:`CONFIG_KEYS`, read from ``decoder.config``, and the
    model files by name and (the LM) SHA-256."""
    config = {key: decoder.config[key] for key in CONFIG_KEYS}
    lm = Path(decoder.config["lm"])
    config.update(hmm=Path(decoder.config["hmm"]).name, dict=Path(decoder.config["dict"]).name, lm=lm.name,
                  lm_sha256=hashlib.sha256(lm.read_bytes()).hexdigest())
    return config


def nbest_distinct(decoder: Any, n: int, scan: int) -> tuple[list[tuple[int, tuple[str, ...]]], int]:
    """Up to ``n`` distinct word sequences from ``decoder.nbest()`` with their bytelog scores (the
    first of each), looking at ``scan`` entries at most; and how many entries were looked at."""
    seen: dict[tuple[str, ...], int] = {}
    looked = 0
    for hyp in decoder.nbest() or ():
        if looked >= scan or len(seen) >= n:
            break
        looked += 1
        if hyp is None or hyp.score <= 0.0:
            continue  # an empty path (no real word), or a score that underflowed
        words = tuple(hyp.hypstr.split())
        if words not in seen:
            seen[words] = round(math.log(hyp.score) / math.log(1.0001))
    return [(score, words) for words, score in seen.items()], looked


def slf_size(path: Path) -> tuple[int, int]:
    """``(nodes, links)`` from an HTK lattice's ``N=... L=...`` header line."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            if "N" in fields and "L" in fields:
                return int(fields["N"]), int(fields["L"])
    raise ValueError(f"{path}: no N=... L=... line")


def process(job: tuple[Utterance, str, int, int]) -> dict[str, Any]:
    """Make one utterance's audio, decode it and write its lattice and n-best file; returns its
    set.json record (including the 1-best as ``hyp``)."""
    utt, out, nbest, scan = job
    out_dir = Path(out)
    wav = out_dir / "wav" / f"{utt.key}.wav"
    record: dict[str, Any] = {"key": utt.key}
    if utt.source_wav is None:
        with tempfile.TemporaryDirectory(dir=out_dir / "work") as tmp:
            tts = Path(tmp) / "tts.wav"
            synthesize(" ".join(utt.words), utt.voice, tts, Path(tmp))
            record.update(voice=utt.voice, tempo=utt.tempo, snr_db=utt.snr_db, noise_offset_s=utt.noise_offset_s)
            record.update(degrade(tts, utt, wav, Path(tmp)))
    else:
        shutil.copyfile(utt.source_wav, wav)
        record.update(voice=None, tempo=1.0, snr_db=None, source=utt.source_wav)
    samples, decoder = read_wav(wav), make_decoder()
    begin = time.perf_counter()
    decoder.start_utt()
    decoder.process_raw(samples.tobytes(), full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    decoded = time.perf_counter()
    lattice, dag = out_dir / "lattices" / f"{utt.key}.slf", decoder.get_lattice()
    if dag is None:
        raise RuntimeError(f"{utt.key}: the decoder made no lattice ({samples.size / 16000:.2f} s of audio)")
    dag.write_htk(str(lattice))
    lattice_written = time.perf_counter()
    entries, looked = nbest_distinct(decoder, nbest, scan)
    done = time.perf_counter()
    if entries:
        lines = ["NBestList1.0"] + [" ".join([f"({score})", *words]) for score, words in entries]
        (out_dir / "nbest" / f"{utt.key}.nbest").write_text("\n".join(lines) + "\n", encoding="utf-8")
    nodes, links = slf_size(lattice)
    record.update(audio_seconds=samples.size / 16000, frames=decoder.n_frames(),
                  decode_seconds=decoded - begin, lattice_seconds=lattice_written - decoded,
                  nbest_seconds=done - lattice_written, lattice_nodes=nodes, lattice_links=links,
                  nbest_size=len(entries), nbest_entries_looked_at=looked,
                  hyp=hyp.hypstr.split() if hyp is not None else [])
    return record


def decode_all(plan: Sequence[Utterance], out: Path, jobs: int, nbest: int, scan: int) -> list[dict[str, Any]]:
    """:func:`process` every utterance, in ``jobs`` worker processes (spawned, each with its own
    decoder) or in this process for ``jobs == 1``; records in plan order."""
    work = [(utt, str(out), nbest, scan) for utt in plan]
    records: list[dict[str, Any]] = []
    with multiprocessing.get_context("spawn").Pool(jobs) if jobs > 1 else contextlib.nullcontext() as pool:
        for record in pool.imap(process, work, chunksize=1) if pool else map(process, work):
            records.append(record)
            if len(records) % 25 == 0 or len(records) == len(work):
                print(f"  {len(records)}/{len(work)} utterances", file=sys.stderr, flush=True)
    return records


# ------------------------------------------------------------------------------- the LM as ARPA
def check_arpa(arpa: Path, lm_bin: Path, trie: Any, samples: int = 300, seed: int = 0) -> dict[str, Any]:
    """Score ``samples`` listed 3-grams, listed 2-grams and random word triples (mostly backed off)
    with the project's ARPA reader and with ``pocketsphinx.NGramModel.prob`` on ``lm_bin``;
    PocketSphinx truncates its scores to whole units of log base 1.0001, so they agree within
    about 2 units (``LOG10_BASE`` each) when the ARPA file is right."""
    from pocketsphinx import Config, LogMath, NGramModel

    from lm.ngram.sphinx import LOG10_BASE
    from lm.ngram.store import read_arpa_store

    store = read_arpa_store(arpa, dtype=np.float64)
    logmath = LogMath(1.0001)  # kept alive while the model is used
    model = NGramModel(Config(), logmath, str(lm_bin))
    rng = np.random.default_rng(seed)
    vocab = np.array([i for i, w in enumerate(trie.words) if w != "<s>"])
    queries = [g[rng.integers(0, len(g), samples)] for g in trie.grams[1:]]
    queries.append(np.concatenate([rng.integers(0, len(trie.words), (samples, 2)),
                                   rng.choice(vocab, (samples, 1))], axis=1))
    worst = 0.0
    for rows in queries:
        rows = rows[rows[:, -1] != trie.words.index("<s>")]
        names = [[trie.words[i] for i in row] for row in rows]
        ids = np.array([[store.id(w) for w in ws] for ws in names], dtype=np.int64)
        ours = store.score(ids[:, :-1], np.full(len(ids), ids.shape[1] - 1), ids[:, -1]) / math.log(10)
        theirs = np.array([model.prob(ws[::-1]) for ws in names]) * LOG10_BASE
        worst = max(worst, float(np.abs(ours - theirs).max()))
    result = {"ngrams_checked": int(sum(len(q) for q in queries)), "max_abs_diff_log10": worst,
              "tolerance_log10": 2.5 * LOG10_BASE}
    if worst > result["tolerance_log10"]:
        raise AssertionError(f"{arpa} disagrees with NGramModel.prob by {worst:.2e} log10 (check {result})")
    return result


def export_decoder_lm(lm_bin: Path, out: Path) -> dict[str, Any]:
    """Write ``out`` (ARPA, gzipped) from the decoder's ``lm_bin`` (:mod:`lm.ngram.sphinx`) and check
    it; returns counts and check."""
    from lm.ngram.sphinx import read_sphinx_trie, write_trie_arpa

    trie = read_sphinx_trie(lm_bin)
    write_trie_arpa(trie, out)
    return {"file": out.name, "from": lm_bin.name, "counts": [len(g) for g in trie.grams],
            "header_counts": list(trie.header_counts), "check": check_arpa(out, lm_bin, trie)}


# ------------------------------------------------------------------------------- the set
def tool_versions() -> dict[str, str | None]:
    """Versions of pocketsphinx, python, sox, flite and festival (None where absent)."""
    from importlib.metadata import version

    def first_line(program: str) -> str | None:  # of ``program --version``, the first naming a version
        if shutil.which(program) is None:
            return None
        result = subprocess.run([program, "--version"], capture_output=True, text=True)
        return next((line.strip() for line in (result.stdout + result.stderr).splitlines()
                     if re.search(r"\d+\.\d+", line)), None)

    return {"pocketsphinx": version("pocketsphinx"), "python": platform.python_version(),
            **{program: first_line(program) for program in ("sox", "flite", "festival")}}


def write_trn(path: Path, rows: Iterable[tuple[str, Sequence[str]]]) -> None:
    path.write_text("".join(f"{' '.join(words)} ({key})\n".lstrip() for key, words in rows), encoding="utf-8")


def build_set(plan: Sequence[Utterance], out: Path, *, name: str, jobs: int = 1, nbest: int = 50,
              nbest_scan: int = 2000, arpa: bool = True, info: dict[str, Any] | None = None,
              command: str | None = None) -> dict[str, Any]:
    """Decode ``plan`` into the set directory ``out`` (module docstring); returns set.json's content
    (``command``: how it was asked for, by default this process's arguments)."""
    started = time.perf_counter()
    synthetic, voices = any(u.source_wav is None for u in plan), {u.voice for u in plan if u.voice}
    if synthetic:
        check_tools(voices)
    for sub in ("wav", "lattices", "nbest", "work"):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir(parents=True)
    make_decoder.cache_clear()
    decoder = make_decoder()  # used by decode_all when jobs == 1 (and for the config)
    records = decode_all(plan, out, jobs, nbest, nbest_scan)
    shutil.rmtree(out / "work", ignore_errors=True)
    write_trn(out / "ref.trn", ((u.key, u.words) for u in plan))
    write_trn(out / "hyp.trn", ((r["key"], r.pop("hyp")) for r in records))
    meta: dict[str, Any] = {
        "name": name, "command": command or command_line("bench.pocketsphinx_set"), "synthetic": synthetic,
        "audio": ("synthetic: text-to-speech (flite, festival), sox tempo and pink noise" if synthetic
                  else "real speech (LibriVox recordings from pocketsphinx-testdata), unchanged"),
        "debian_packages": debian_packages(synthetic, voices),
        **(info or {}), "jobs": jobs, "versions": tool_versions(),
        "decoder": {"constructor": "pocketsphinx.Decoder(fwdflat=False)", **decoder_config(decoder)},
        "nbest": {"format": "SRILM NBestList1.0, score = PocketSphinx A* path score in bytelog", "size": nbest,
                  "distinct": True, "entries_scanned_at_most": nbest_scan},
        "files": {"wav": "wav/{key}.wav", "lattice": "lattices/{key}.slf", "nbest": "nbest/{key}.nbest",
                  "hyp": "hyp.trn", "ref": "ref.trn"},
    }
    if arpa:
        meta["decoder_lm"] = export_decoder_lm(Path(decoder.config["lm"]), out / "decoder-lm.ngram.arpa.gz")
        meta["files"]["decoder_lm"] = "decoder-lm.ngram.arpa.gz"
    meta["wall_seconds"] = time.perf_counter() - started
    meta["utterances"] = records
    write_json(out / "set.json", meta)
    return meta


def debian_packages(synthetic: bool, voices: Iterable[str]) -> list[str]:
    """The Debian packages a set needs: sox and its TTS engines and voices; or pocketsphinx-testdata."""
    if not synthetic:
        return [DEBIAN_PACKAGES["librivox"]]
    parsed = [voice.split(":", 1) for voice in voices]
    return sorted({"sox", *(engine for engine, _ in parsed), *(DEBIAN_PACKAGES[name] for engine, name in parsed
                                                                if engine == "festival" and name in DEBIAN_PACKAGES)})


# ------------------------------------------------------------------------------- summary
def summarize(set_dir: str | Path) -> dict[str, Any]:
    """What a set gives, from its files only: WERs against ``ref.trn`` (words compared
    case-insensitively), the real-time factor of decoding (``set.json``) and lattice sizes (the
    ``.slf`` headers). ``wer`` holds :meth:`afp.wer.WerStats.to_json` columns, to which other
    oracles (a lattice oracle) can be added:

    ``first_pass``  the decoder's 1-best (``hyp.trn``);
    ``nbestN_top``  the first hypothesis of each n-best list;
    ``nbestN_oracle``  per utterance the n-best hypothesis with the fewest errors;
    ``first_pass_or_nbestN_oracle``  the same over the 1-best and the list together.

    A missing n-best file counts as one empty hypothesis. PocketSphinx's A* (``decoder.nbest()``)
    scores a filler word (silence, noise) as a word the LM cannot predict (its log-zero), so its
    lists avoid paths through pauses, filling them with short words instead ("a a a"), and their
    top is often worse than the 1-best of its bestpath search, which skips fillers in the LM."""
    from afp.wer import WerStats, read_references, word_errors
    from lattices.formats.nbest import read_srilm_nbest

    set_dir = Path(set_dir)
    meta = json.loads((set_dir / "set.json").read_text(encoding="utf-8"))
    n = meta["nbest"]["size"]
    refs, hyps = (read_references(set_dir / name) for name in ("ref.trn", "hyp.trn"))
    columns = ("first_pass", f"nbest{n}_top", f"nbest{n}_oracle", f"first_pass_or_nbest{n}_oracle")
    totals = dict.fromkeys(columns, WerStats.zero())
    records = meta["utterances"]
    voice_of = {r["key"]: r.get("voice") for r in records}
    by_voice: dict[str, Any] = {}
    sizes = []
    for key, ref in refs.items():
        path = set_dir / "nbest" / f"{key}.nbest"
        listed = read_srilm_nbest(path.read_text(encoding="utf-8"), str(path), key).hypotheses if path.is_file() else ()
        sizes.append(len(listed))
        candidates = [word_errors(ref, h.words, ignore_case=True) for h in listed] or [word_errors(ref, [])]
        first = word_errors(ref, hyps.get(key, []), ignore_case=True)
        for column, stats in zip(columns, (first, candidates[0], _fewest(candidates), _fewest([first, *candidates]))):
            totals[column] = totals[column] + stats
        if voice_of.get(key):
            by_voice[voice_of[key]] = by_voice.get(voice_of[key], WerStats.zero()) + first
    audio = sum(r["audio_seconds"] for r in records)
    links = [slf_size(set_dir / "lattices" / f"{key}.slf")[1] for key in refs]
    return {
        "set_dir": shown(set_dir), "synthetic": meta["synthetic"], "audio": meta["audio"],
        "debian_packages": meta["debian_packages"], "command": meta["command"],
        "decoder": meta["decoder"]["constructor"], "pocketsphinx": meta["versions"]["pocketsphinx"],
        "utterances": len(refs), "ref_words": totals["first_pass"].ref_words, "audio_seconds": round(audio, 2),
        "voices": {voice: {"utterances": stats.sentences, "first_pass_wer": round(stats.wer, 2)}
                   for voice, stats in sorted(by_voice.items())},
        "wer": {column: stats.to_json() for column, stats in totals.items()},
        "nbest_mean_size": round(statistics.fmean(sizes), 2) if sizes else 0.0,
        "rtf": {name: round(sum(sum(r[f"{part}_seconds"] for part in parts) for r in records) / audio, 4)
                if audio else 0.0 for name, parts in (("decode", ["decode"]),
                                                      ("decode_lattice_nbest", ["decode", "lattice", "nbest"]))},
        "jobs": meta.get("jobs"), "wall_seconds": round(meta.get("wall_seconds", 0.0), 1),
        "lattice_links": {"median": statistics.median(links) if links else 0, "max": max(links, default=0),
                          "mean": round(statistics.fmean(links), 1) if links else 0.0},
    }


def _fewest(candidates: Sequence[Any]) -> Any:
    """The :class:`afp.wer.WerStats` with the fewest errors (the first of equals)."""
    return min(candidates, key=lambda stats: stats.errors)


def record_summary(name: str, summary: dict[str, Any], results: Path = RESULTS_FILE) -> None:
    """Put ``summary`` under ``name`` in ``results`` (other sets' entries kept)."""
    data = json.loads(results.read_text(encoding="utf-8")) if results.is_file() else {}
    data[name] = summary
    write_json(results, dict(sorted(data.items())))


# ------------------------------------------------------------------------------- command line
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.pocketsphinx_set", description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--ref", type=Path, help="references, sclite trn (WORDS (utt-id)), to speak with TTS")
    source.add_argument("--librivox", action="store_true",
                        help=f"the 5 real utterances of {LIBRIVOX_DIR} (else of tests/fixtures/librivox)")
    source.add_argument("--summarize", type=Path, metavar="SET_DIR", help="only summarize an existing set")
    parser.add_argument("--librivox-dir", type=Path, help="with --librivox: another folder of the same layout")
    parser.add_argument("--name", help="set name (default: the trn's folder name; 'librivox')")
    parser.add_argument("--out", type=Path, help="set directory (default: runs/pocketsphinx/NAME)")
    parser.add_argument("--limit", type=int, default=400, help="utterances, evenly spaced over the file (400)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the subset, voices, tempo and noise (1)")
    parser.add_argument("--voices", default=",".join(VOICES), help="engine:voice,... (default: the 7 voices)")
    parser.add_argument("--tempo", default=",".join(map(str, TEMPO_RANGE)),
                        help=f"LOW,HIGH: each utterance's sox tempo, uniform in this range (default {TEMPO_RANGE})")
    parser.add_argument("--snr-db", default=",".join(map(str, SNRS_DB)),
                        help=f"the pink noise's SNRs in dB, one drawn per utterance (default {SNRS_DB}); a harder, "
                             f"denser set: e.g. --snr-db 10,15 --tempo 1.1,1.25")
    parser.add_argument("--jobs", type=int, default=1, help="decoding worker processes (1)")
    parser.add_argument("--nbest", type=int, default=50, help="distinct hypotheses per n-best list (50)")
    parser.add_argument("--nbest-scan", type=int, default=2000, help="decoder.nbest() entries looked at, at most")
    parser.add_argument("--no-arpa", action="store_true", help="do not write decoder-lm.ngram.arpa.gz")
    parser.add_argument("--results", type=Path, default=RESULTS_FILE,
                        help=f"summary JSON to update ({shown(RESULTS_FILE)}); '-' for none")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.nbest < 1 or args.nbest_scan < args.nbest:
        parser.error("--jobs and --nbest must be positive and --nbest-scan at least --nbest")
    return args


def build_from_args(args: argparse.Namespace, argv: Sequence[str]) -> tuple[str, Path]:
    """Plan and build the set that the command line asks for; returns its name and directory."""
    if importlib.util.find_spec("pocketsphinx") is None:
        raise MissingTool("pocketsphinx is not installed: pip install -e '.[decoder]' (pocketsphinx>=5.1)")
    from afp.wer import read_references

    if args.librivox:
        name, plan = args.name or "librivox", plan_librivox(args.librivox_dir)
        info: dict[str, Any] = {"source": shown(Path(plan[0].source_wav or "").parent)}
    else:
        name = args.name or args.ref.resolve().parent.name
        voices = [v.strip() for v in args.voices.split(",") if v.strip()]
        refs = read_references(args.ref)
        tempo_range = tuple(float(x) for x in args.tempo.split(","))
        snrs = tuple(float(x) for x in args.snr_db.split(","))
        if len(tempo_range) != 2 or not 0.5 <= tempo_range[0] <= tempo_range[1] <= 2.0:
            raise SystemExit(f"--tempo {args.tempo!r}: expected LOW,HIGH within 0.5,2")
        plan = plan_tts(refs, args.limit, args.seed, voices, tempo_range, snrs)
        info = {"source": shown(args.ref), "source_utterances": len(refs), "limit": args.limit,
                "seed": args.seed, "voices": voices, "subset": "evenly spaced lines (choose_subset)",
                "tempo_range": list(tempo_range), "snrs_db": list(snrs)}
    set_dir = args.out or REPO_ROOT / "runs" / "pocketsphinx" / name
    build_set(plan, set_dir, name=name, jobs=args.jobs, nbest=args.nbest, nbest_scan=args.nbest_scan,
              arpa=not args.no_arpa, info=info, command=command_line("bench.pocketsphinx_set", argv))
    return name, set_dir


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The command line (module docstring); returns the set's summary."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.summarize is not None:
        set_dir = args.summarize
        name = args.name or json.loads((set_dir / "set.json").read_text(encoding="utf-8"))["name"]
    else:
        try:
            name, set_dir = build_from_args(args, argv)
        except (MissingTool, ValueError) as err:  # ValueError: afp.wer.ReferencesError, a bad option
            raise SystemExit(f"pocketsphinx_set: error: {err}") from None
    summary = summarize(set_dir)
    if str(args.results) != "-":
        record_summary(name, summary, args.results)
    print(json.dumps({name: summary}, indent=1))
    return summary


if __name__ == "__main__":
    main()
