"""Test data factories, in one place: tiny vocabularies, corpora, models of every cell type."""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from lm.checkpoint import prepare_model, save_checkpoint
from lm.config import ModelConfig
from lm.corpus import Batch, collate_flat
from lm.model import LanguageModel, build_model
from lm.vocab import Vocabulary

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

WORDS = "the a cat dog sat ran on mat log and big small red".split()

#: every recurrent cell configuration the properties must hold for (name -> ModelConfig fields)
CELL_CONFIGS: dict[str, dict] = {
    "elman-tanh": {"cell": "elman", "activation": "tanh"},
    "elman-sigmoid": {"cell": "elman", "activation": "sigmoid"},
    "lstm": {"cell": "lstm"},
    "gru": {"cell": "gru"},
    "scrn-fixed": {"cell": "scrn", "context_units": 3},
    "scrn-learned": {"cell": "scrn", "context_units": 3, "learn_decay": True},
    "elman-2layers": {"cell": "elman", "layers": 2},
    "lstm-3layers": {"cell": "lstm", "layers": 3},
    "scrn-2layers": {"cell": "scrn", "context_units": 2, "layers": 2},
}

DEVICES = [pytest.param("cpu"),
           pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))]


def tiny_vocab() -> Vocabulary:
    return Vocabulary.from_sentences([WORDS])


def random_sentences(count: int, seed: int = 0, min_len: int = 1, max_len: int = 9) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(WORDS) for _ in range(rng.randint(min_len, max_len))] for _ in range(count)]


def make_model(vocab: Vocabulary, seed: int = 0, init_range: float = 0.5, device: str = "cpu",
               **fields) -> LanguageModel:
    """A randomly initialized model in eval mode; a wide init makes differences visible."""
    torch.manual_seed(seed)
    fields.setdefault("hidden", 8)
    model = build_model(ModelConfig(vocab_size=vocab.size, **fields))
    model.reset_parameters(init_range)
    prepare_model(model, vocab)
    return model.to(device).eval()


def collate(sentences: Sequence[torch.Tensor]) -> Batch:
    """Pad encoded sentences (each ``[<s>, ..., </s>]``, as ``lm.corpus.encode(...).ids`` gives them)
    into one batch, the way training batches them (``lm.corpus.collate_flat``)."""
    return collate_flat(torch.cat(list(sentences)), torch.tensor([len(s) for s in sentences], dtype=torch.long))


def free_port() -> int:
    """A TCP port nobody listens on now (for a torch.distributed rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_text(path: Path, sentences: list[list[str]]) -> Path:
    path.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    return path


def saved_model(directory: Path, vocab: Vocabulary | None = None, **fields) -> Path:
    vocab = vocab or tiny_vocab()
    fields.setdefault("mode", "afp")
    fields.setdefault("rho", 3)
    return save_checkpoint(directory, make_model(vocab, **fields), vocab, {"note": "test model"})


def kn_arpa(path: Path, sentences: list[list[int]], vocab: Vocabulary, order: int) -> Path:
    """A Kneser-Ney model of encoded ``sentences`` (``[<s>, w_1, ..., </s>]`` ids of ``vocab``),
    built and written as ARPA by ``afp ngram``'s estimator (:mod:`lm.ngram.kneser_ney`); ``path``."""
    import numpy as np

    from lm.ngram import kneser_ney

    words = [s[1:-1] for s in sentences]
    tokens = np.array([i for s in words for i in s], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in words])]).astype(np.int64)
    predictable = np.array(vocab.predictable_mask())
    chunks = kneser_ney.chunks_of([(tokens, offsets)], vocab.bos_id, vocab.eos_id, vocab.unk_id)
    model = kneser_ney.build(chunks, order, vocab.size, vocab.bos_id, predictable, vocab.words)
    kneser_ney.write_arpa(model, vocab.words, vocab.bos_id, predictable, path)
    return path


def patterned_sentences(count: int, seed: int = 0) -> list[list[str]]:
    """Sentences from a small grammar, so that a model has something to learn."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        det = rng.choice(["the", "a"])
        adj = rng.choice(["big", "small", "red"])
        noun, verb, place = rng.choice([("cat", "sat", "mat"), ("dog", "ran", "log")])
        words = [det, adj, noun, verb, "on", det, place]
        if rng.random() < 0.3:
            words += ["and", "the", noun, verb]
        out.append(words)
    return out


LATTICE_SYMBOLS = ("<eps>", *WORDS, "!SIL", "<s>", "</s>", "zebra")  # zebra is OOV for tiny_vocab()


def random_lattice(seed: int, num_states: int = 7, extra_arcs: int = 6, key: str = "rand",
                   symbols: tuple[str, ...] = LATTICE_SYMBOLS):
    """A random acyclic lattice: a chain 0 -> 1 -> ... -> n-1 plus random forward arcs, words
    drawn from ``symbols`` (epsilons, silence, <s>/</s>, an OOV word included), two final states."""
    from lattices.lattice import Lattice

    rng = random.Random(seed)
    arcs = []

    def arc(s, d):
        word = rng.randrange(len(symbols)) if rng.random() > 0.15 else 0
        arcs.append((s, d, word, -rng.uniform(0, 30), -rng.uniform(0, 5)))

    for s in range(num_states - 1):
        arc(s, s + 1)
    for _ in range(extra_arcs):
        s = rng.randrange(num_states - 1)
        arc(s, rng.randrange(s + 1, num_states))
    finals = {num_states - 1: (0.0, 0.0), num_states - 2: (-rng.uniform(0, 2), -rng.uniform(0, 1))}
    return Lattice.from_arcs(key, arcs, finals, symbols)


def all_paths(lattice):
    """Every complete path as (arc list, final index) by depth-first search (small lattices only)."""
    out_arcs = {}
    for a, s in enumerate(lattice.src.tolist()):
        out_arcs.setdefault(s, []).append(a)
    final_pos = {s: i for i, s in enumerate(lattice.finals.tolist())}
    dst = lattice.dst.tolist()
    paths = []

    def walk(state, arcs):
        if state in final_pos:
            paths.append((list(arcs), final_pos[state]))
        for a in out_arcs.get(state, []):
            walk(dst[a], arcs + [a])

    walk(lattice.start, [])
    return paths


def nbest_to_json(nbest) -> dict[str, Any]:
    """The JSON form of one ``lattices.formats.nbest.NBestList`` (what ``nbest_from_json`` reads;
    words as one space-separated string), for writing n-best test inputs."""
    return {"key": nbest.key, "hypotheses": [
        {"words": " ".join(hyp.words), "scores": {name: float(value) + 0.0 for name, value in hyp.scores.items()},
         **({} if hyp.total is None else {"total": float(hyp.total) + 0.0})}
        for hyp in nbest.hypotheses]}


MUTATIONS = ("delete", "duplicate", "garble", "newline", "drop-line", "dup-line", "swap-lines")


def mutate_lines(text: str, mutations: list[tuple[str, int, str]], separator: str = " ") -> str:
    """Apply fuzzing mutations ``(operation, position, token)`` to the tokens and lines of ``text``.

    Operations: delete / duplicate / garble a token, split a line (newline), drop / duplicate a
    line, swap a line with the next (see :data:`MUTATIONS`)."""
    lines = [line.split(separator) for line in text.split("\n")]
    for op, where, token in mutations:
        i = where % len(lines)
        row = lines[i]
        j = where % (len(row) or 1)
        if op == "delete" and row:
            del row[j]
        elif op == "duplicate" and row:
            row.insert(j, row[j])
        elif op == "garble" and row:
            row[j] = token
        elif op == "newline":
            lines[i:i + 1] = [row[:j], row[j:]]
        elif op == "drop-line" and len(lines) > 1:
            del lines[i]
        elif op == "dup-line":
            lines.insert(i, list(row))
        elif op == "swap-lines" and i + 1 < len(lines):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return "\n".join(separator.join(row) for row in lines)


#: fuzzing mutations that keep a line-based lattice or model file valid and equal in meaning
VALID_MUTATIONS = ("permute", "trailing-space", "blank-padding")


def neutral_mutation(lines: list[str], movable: list[int], ops: list[tuple[str, int]]) -> list[str]:
    """``lines`` changed only in ways a reader must accept with the same meaning: lines at the
    indices ``movable`` permuted among themselves, trailing spaces or tabs on a line, extra blanks
    between fields. A reader that rejects every input fails a test built on this, which a fuzz
    test that only accepts errors cannot notice."""
    out = list(lines)
    for op, where in ops:
        if op == "permute" and len(movable) > 1:
            i, j = movable[where % len(movable)], movable[(where // 7) % len(movable)]
            out[i], out[j] = out[j], out[i]
        elif op == "trailing-space" and out:
            i = where % len(out)
            if out[i].strip():
                out[i] += " \t"[where % 2] * (1 + where % 3)
        elif op == "blank-padding" and out:
            i = where % len(out)
            if out[i].strip():
                out[i] = out[i].replace(" ", "  ").replace("\t", "\t ")
    return out


def espnet_subset(source: Path, out: Path, utterances: int) -> Path:
    """The first ``utterances`` lines of every ``Kbest_recog/{text,score,scores}`` of the ESPnet
    decode folder ``source``, written as a folder of the same layout at ``out``."""
    for folder in sorted(source.glob("*best_recog")):
        (out / folder.name).mkdir(parents=True)
        for name in ("text", "score", "scores"):
            lines = (folder / name).read_text().splitlines()[:utterances]
            (out / folder.name / name).write_text("\n".join(lines) + "\n")
    return out


def replacing_options(**fields):
    """Engine options that replace the first-pass LM by the new one at weight 1 (``lm_weights``
    (1.0,), ``old_lm_weight`` 0, no unknown-word penalty) unless ``fields`` say otherwise: the
    setting the engine's exactness tests compare with brute force. (``RescoreOptions()`` itself
    has the doors' untuned defaults: the old LM kept, the new LM at a quarter of its weight.)"""
    from lattices.rescore import RescoreOptions

    return RescoreOptions(**{"lm_weights": (1.0,), "old_lm_weight": 0.0, "unk_penalty": 0.0, **fields})


def shared_data_file(*parts: str) -> Path:
    """The path of a file under ``../shared/data`` that a test needs: a skip only when the shared
    data directory itself is absent (a checkout without it); when the directory is there, a
    missing file is a failure (a wrong recorded path must not turn into a skip)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent")
    path = SHARED_DATA.joinpath(*parts)
    assert path.is_file(), f"{path} is absent, though {SHARED_DATA} is there: a wrong path?"
    return path


def require_shared(*paths: Path) -> None:
    """Skip when the shared data directory is absent (a checkout without ``../shared``); when it is
    there, fail unless every one of ``paths`` exists: a wrong path must not become a skip."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent")
    missing = [str(p) for p in paths if not Path(p).exists()]
    assert not missing, f"absent though {SHARED_DATA} is there (a wrong path?): {', '.join(missing)}"


def levenshtein(a: list[str], b: list[str]) -> int:
    """Word-level edit distance with unit costs, the textbook dynamic programme (a reference independent of kaldialign and afp.wer; tests/lattices/test_mbr.py
    checks it by hand)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]
