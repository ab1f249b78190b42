"""A training run carried between bare machines (lm.carry): packed in pieces, checked, unpacked,
resumed at the batch where it stopped."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from lm.carry import CARRIED, CarryError, pack, unpack
from lm.train import train
from tests.lm.test_resume import FIELDS, config, corpus  # noqa: F401 - the corpus fixture


def test_a_packed_run_resumes_where_it_stopped(tmp_path, corpus):  # noqa: F811
    train(FIELDS, config(corpus, max_steps=7, checkpoint_every_steps=7), tmp_path / "run", progress=False)
    record = pack(tmp_path / "run", tmp_path / "carry", piece_bytes=1000)
    assert record["step"] == 7 and len(record["weights"]["pieces"]) > 1
    assert all(p["bytes"] <= 1000 for p in record["weights"]["pieces"])
    assert json.loads((tmp_path / "carry" / CARRIED).read_text()) == record
    assert unpack(tmp_path / "carry", tmp_path / "moved") == record
    saved = load_file(tmp_path / "run" / "resume" / "model.safetensors")
    moved = load_file(tmp_path / "moved" / "resume" / "model.safetensors")
    for name, value in saved.items():  # the weights rounded to bfloat16, as float32 again
        assert moved[name].dtype == torch.float32 and torch.equal(moved[name], value.to(torch.bfloat16).float())
    train(FIELDS, config(corpus, max_steps=10, checkpoint_every_steps=7), tmp_path / "moved", resume=True,
          progress=False)
    state = json.loads((tmp_path / "moved" / "resume" / "state.json").read_text())
    assert state["step"] == 10 and state["batches_done"] == 10  # 3 more batches of epoch 1, none skipped or redone


def test_a_damaged_or_missing_piece_is_refused_and_nothing_is_overwritten(tmp_path, corpus):  # noqa: F811
    train(FIELDS, config(corpus, max_steps=3, checkpoint_every_steps=3), tmp_path / "run", progress=False)
    record = pack(tmp_path / "run", tmp_path / "carry", piece_bytes=1000)
    piece = tmp_path / "carry" / record["weights"]["pieces"][1]["name"]
    data = bytearray(piece.read_bytes())
    data[10] ^= 1
    piece.write_bytes(bytes(data))
    with pytest.raises(CarryError, match="damaged"):
        unpack(tmp_path / "carry", tmp_path / "moved")
    piece.unlink()
    with pytest.raises(CarryError, match="missing piece"):
        unpack(tmp_path / "carry", tmp_path / "moved")
    with pytest.raises(CarryError, match="a resume state is there already"):
        unpack(tmp_path / "carry", tmp_path / "run")
    with pytest.raises(CarryError, match="no resume state to pack"):
        pack(tmp_path / "nothing", tmp_path / "carry2")


def test_a_prepared_corpus_in_pieces_comes_back_the_same(tmp_path):
    """afp prepare's shards (OOV words among them) packed in pieces of a few hundred bytes and
    unpacked: the same sentences, counts and vocabulary; a damaged piece is refused."""
    from lm.config import PrepareConfig
    from lm.corpus_pieces import PIECES, PiecesError, pack as pack_corpus, unpack as unpack_corpus
    from lm.shards import open_prepared, prepare
    from tests.factories import patterned_sentences, write_text

    train_text = write_text(tmp_path / "train.txt", patterned_sentences(300, seed=1) + [["zzz", "qqq"]])
    valid_text = write_text(tmp_path / "valid.txt", patterned_sentences(20, seed=2) + [["never", "seen"]])
    prepare(PrepareConfig(text=(str(train_text),), valid=str(valid_text), out=str(tmp_path / "data"), min_count=2))
    record = pack_corpus(tmp_path / "data", tmp_path / "pieces", piece_bytes=700)
    assert len(record["pieces"]) > 2 and all(p["bytes"] <= 700 for p in record["pieces"])
    unpack_corpus(tmp_path / "pieces", tmp_path / "back")
    before, after = open_prepared(tmp_path / "data"), open_prepared(tmp_path / "back")
    assert before.vocab == after.vocab
    for split in ("train", "valid"):
        a, b = getattr(before, split), getattr(after, split)
        assert (a.sentences, a.words, a.oov) == (b.sentences, b.words, b.oov) and a.oov > 0
        assert all(torch.equal(a[i], b[i]) for i in range(a.sentences))
    piece = tmp_path / "pieces" / record["pieces"][0]["name"]
    piece.write_bytes(piece.read_bytes()[:-1] + b"x")
    with pytest.raises(PiecesError, match="damaged"):
        unpack_corpus(tmp_path / "pieces", tmp_path / "again")
    with pytest.raises(PiecesError, match="already holds prepared data"):
        unpack_corpus(tmp_path / "pieces", tmp_path / "back")
    assert (tmp_path / "pieces" / PIECES).is_file()
