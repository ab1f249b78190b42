"""bench.pocketsphinx_wer_table end to end on the five real PocketSphinx fixture lattices, split 3/2
into two tiny "dev sets", with tiny models (tests.factories): the decoder's WER recomputed here,
every hypothesis a path of its lattice or an entry of its n-best list, resuming, the report."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from afp.wer import read_hypotheses
from bench import pocketsphinx_wer_table as table_mod
from afp.baselines import first_pass_nbest, kaldi_style_scored, nbest_lattice, nbest_scored, sentence_logprobs
from bench.report import render
from lattices.formats import read_lattice_file
from lattices.oracle import oracle_errors
from lattices.rescore import RescoreOptions
from lm.checkpoint import load_checkpoint
from lm.vocab import Vocabulary
from tests.factories import levenshtein, saved_model

FIXTURES = Path(__file__).parent / "fixtures"
KEYS = [f"sense_and_sensibility_01_austen_64kb-{n}" for n in ("0870", "0880", "0890", "0920", "0930")]
SPLIT = {"dev_clean": KEYS[:3], "dev_other": KEYS[3:]}


def _references() -> dict[str, list[str]]:
    refs = {}
    for line in (FIXTURES / "librivox" / "transcription").read_text(encoding="utf-8").splitlines():
        text, _, key = line.rpartition("(")
        refs[key.rstrip(")").strip()] = [w.upper() for w in text.split() if w not in ("<s>", "</s>")]
    return refs


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The two sets in load_set's layout and the tiny models (upper-case vocabulary, as the
    bundled models: the lower-case lattices are looked up in another case)."""
    root = tmp_path_factory.mktemp("wer_table")
    refs = _references()
    hyp_lines = {line.rpartition("(")[2].rstrip(")"): line
                 for line in (FIXTURES / "pocketsphinx" / "hyp.trn").read_text(encoding="utf-8").splitlines()}
    for name, keys in SPLIT.items():
        out = root / "sets" / name
        (out / "lattices").mkdir(parents=True)
        for key in keys:
            (out / "lattices" / f"{key}.slf").write_bytes(
                gzip.decompress((FIXTURES / "pocketsphinx" / f"{key}.slf.gz").read_bytes()))
        (out / "ref.trn").write_text("".join(f"{' '.join(refs[k])} ({k})\n" for k in keys), encoding="utf-8")
        (out / "hyp.trn").write_text("".join(hyp_lines[k] + "\n" for k in keys), encoding="utf-8")
        (out / "set.json").write_text(json.dumps({"synthetic": False, "utterances": [
            {"key": k, "audio_seconds": 5.0, "decode_seconds": 1.0} for k in keys]}), encoding="utf-8")
    lattice_words = set()
    for name, keys in SPLIT.items():
        for k in keys:
            lattice_words.update(read_lattice_file(root / "sets" / name / "lattices" / f"{k}.slf")[0].symbols[1:])
    vocab = Vocabulary.from_sentences([sorted(w.upper() for w in lattice_words)[::2]])  # half the words are OOV
    afp = saved_model(root / "afp", vocab, rho=2, cell="gru")
    gru = saved_model(root / "gru", vocab, mode="exact", rho=None, cell="gru", seed=1)
    return {"root": root, "refs": refs, "afp": afp, "gru": gru}


def _systems(world) -> list[table_mod.System]:
    return [table_mod.System("decoder", "decoder 1-best", "decoder"),
            table_mod.System("nbest50-afp", "5-best, AFP", "nbest", world["afp"], 5),
            table_mod.System("kaldi-gru", "Kaldi-style, GRU", "kaldi", world["gru"]),
            table_mod.System("lattice-gru-rho4", "AFP twin", "lattice", world["root"] / "no-such-model",
                             absent="not trained")]


def _build(world, out: Path, **kwargs):
    return table_mod.build_table(_systems(world), out, world["root"] / "sets", limit=None, restarts=0, folds=1,
                                 command="test", cache=world["root"] / "cache", **kwargs)


@pytest.fixture(scope="module")
def built(world):
    out = world["root"] / "results" / "pocketsphinx_wer_table.json"
    return out, _build(world, out)


def test_decoder_wer_is_hyp_trn_against_the_references(world, built):
    _, table = built
    for name, keys in SPLIT.items():
        other = next(n for n in SPLIT if n != name)
        row = table["rows"][f"decoder: tuned on {other}, applied to {name}"]
        hyps = read_hypotheses(world["root"] / "sets" / name / "hyp.trn")
        errors = sum(levenshtein(world["refs"][k], [w.upper() for w in hyps[k]]) for k in keys)
        words = sum(len(world["refs"][k]) for k in keys)
        assert row["errors"] == errors and row["ref_words"] == words
        assert row["wer"] == pytest.approx(100.0 * errors / words)
        assert "rescore_seconds" not in row  # the decoder's own output: nothing to time


def test_every_hypothesis_is_a_path_of_its_lattice_or_an_nbest_entry(world, built):
    _, table = built
    scales = RescoreOptions()
    for key_row, row in table["rows"].items():
        if row["system"] == "decoder":
            continue
        assert row["rescore_seconds_per_utterance"] > 0 and row["tune_seconds"] > 0
        assert row["point"]["lm_weight"] >= 0
        for utt in row["per_utterance"]:
            (lattice,) = read_lattice_file(world["root"] / "sets" / row["applied_to"] / "lattices" / f"{utt['key']}.slf")
            words = utt["words"].split()
            if row["system"] == "nbest50-afp":
                listed = first_pass_nbest(lattice, 5, *scales.scales_for(lattice))
                assert tuple(words) in [h.words for h in listed.hypotheses], (key_row, utt["key"])
            else:  # some path of the lattice spells it exactly
                assert oracle_errors(lattice, words)[0] == 0, (key_row, utt["key"])
            assert utt["errors"] == levenshtein(world["refs"][utt["key"]], [w.upper() for w in words])


def test_resuming_skips_finished_rows_and_absent_models_are_reported(world, built, monkeypatch):
    out, table = built
    assert set(table["unavailable"]) == {"lattice-gru-rho4"}
    assert table["unavailable"]["lattice-gru-rho4"].startswith("not trained")
    assert len(table["rows"]) == 6
    nbest_row = table["rows"]["kaldi-gru: tuned on dev_clean, applied to dev_other"]
    assert set(nbest_row["against"]) == {"decoder", "nbest50-afp"}
    assert nbest_row["against"]["decoder"]["wer_a"] == pytest.approx(
        table["rows"]["decoder: tuned on dev_clean, applied to dev_other"]["wer"])

    calls = []
    monkeypatch.setattr(table_mod, "run_row", lambda *a, **k: calls.append(a) or pytest.fail("recomputed a row"))
    again = _build(world, out)
    assert calls == [] and again["rows"].keys() == table["rows"].keys()
    with pytest.raises(SystemExit, match="--redo"):  # another limit is never mixed in
        table_mod.build_table(_systems(world), out, world["root"] / "sets", limit=2, command="test",
                              cache=world["root"] / "cache")


def test_rows_computed_by_two_runs_at_once_all_land_in_the_table(world, built, tmp_path, monkeypatch):
    """Run B reads the table, and while it computes its row run A writes its own rows: B's write
    keeps A's rows and system entry (the file is re-read under a lock, not overwritten)."""
    _, table = built
    out = tmp_path / "table.json"
    decoder, nbest = _systems(world)[:2]
    finished = {k: r for k, r in table["rows"].items() if r["system"] == "nbest50-afp"}
    real_run_row = table_mod.run_row

    def b_row(system, *args, **kwargs):
        if system.name == "decoder" and not out.with_name("a-done").exists():
            out.with_name("a-done").write_text("")
            monkeypatch.setattr(table_mod, "run_row", lambda s, *a, **k: finished[
                table_mod._row_key(s.name, a[1]["name"], a[2]["name"])])
            table_mod.build_table([nbest], out, world["root"] / "sets", limit=None, command="run A",
                                  cache=world["root"] / "cache")  # run A, in between
            monkeypatch.setattr(table_mod, "run_row", b_row)
        return real_run_row(system, *args, **kwargs)

    monkeypatch.setattr(table_mod, "run_row", b_row)
    merged = table_mod.build_table([decoder], out, world["root"] / "sets", limit=None, command="run B",
                                   cache=world["root"] / "cache")
    on_disk = json.loads(out.read_text(encoding="utf-8"))
    assert on_disk["rows"].keys() == merged["rows"].keys() == {*finished, *(k for k, r in table["rows"].items()
                                                                            if r["system"] == "decoder")}
    assert on_disk["systems"]["nbest50-afp"]["command"] == "run A" and on_disk["systems"]["decoder"]["command"] == "run B"
    nbest_row = on_disk["rows"]["nbest50-afp: tuned on dev_clean, applied to dev_other"]
    assert nbest_row["against"]["decoder"]["wer_a"] == pytest.approx(
        on_disk["rows"]["decoder: tuned on dev_clean, applied to dev_other"]["wer"])


def test_like_for_like_pairs_compare_the_two_rows_of_each_direction(built, monkeypatch, tmp_path):
    _, table = built
    monkeypatch.setattr(table_mod, "PAIRS", (("kaldi-gru", "nbest50-afp"), ("kaldi-gru", "no-such-system")))
    table = json.loads(json.dumps(table))
    table_mod.compare_rows(table)
    assert {p["applied_to"] for p in table["pairs"]} == set(SPLIT) and len(table["pairs"]) == 2
    for pair in table["pairs"]:
        row = table["rows"][f"kaldi-gru: tuned on {next(n for n in SPLIT if n != pair['applied_to'])}, "
                            f"applied to {pair['applied_to']}"]
        other = table["rows"][table_mod._row_key("nbest50-afp", row["tuned_on"], row["applied_to"])]
        assert pair["system"] == "kaldi-gru" and pair["against"] == "nbest50-afp"
        assert pair["difference"] == pytest.approx(row["wer"] - other["wer"])
        assert pair == {"system": "kaldi-gru", "against": "nbest50-afp", "applied_to": row["applied_to"],
                        **row["against"]["nbest50-afp"]}
    (tmp_path / "pocketsphinx_wer_table.json").write_text(json.dumps(table), encoding="utf-8")
    section = render(tmp_path).split("Like for like")[1]
    assert f"| Kaldi-style, GRU | 5-best, AFP | dev_clean | {table['pairs'][0]['difference']:+.2f} (p" in section \
        or f"| Kaldi-style, GRU | 5-best, AFP | dev_other | {table['pairs'][0]['difference']:+.2f} (p" in section


def test_report_section_renders_the_table(world, built, tmp_path):
    out, table = built
    (tmp_path / out.name).write_text(out.read_text(encoding="utf-8"), encoding="utf-8")
    text = render(tmp_path)
    assert "## Does exact lattice rescoring pay?" in text
    assert "synthetic" in text.split("## Does exact lattice rescoring pay?")[1]
    row = table["rows"]["kaldi-gru: tuned on dev_other, applied to dev_clean"]
    assert f"| Kaldi-style, GRU | dev_clean | {row['wer']:.2f} |" in text
    assert "lattice-gru-rho4 (AFP twin): not trained" in text


def test_kaldi_style_is_exact_on_a_tree_and_nbest_scores_are_the_sentences(world):
    """On an n-best lattice every state has one history, so the Kaldi-style approximation is the
    RNN's sentence score; and nbest_scored puts exactly those sentence scores in new_lm."""
    from afp.tune import hypothesis_table

    rnn = load_checkpoint(world["gru"])
    (lattice,) = read_lattice_file(world["root"] / "sets" / "dev_other" / "lattices" / f"{KEYS[3]}.slf")
    options = RescoreOptions()
    nbest = first_pass_nbest(lattice, 8, *options.scales_for(lattice))
    assert len(nbest.hypotheses) == 8 and len({h.words for h in nbest.hypotheses}) == 8
    words, parts = hypothesis_table(nbest_scored(nbest, lattice, rnn, options))
    kaldi_words, kaldi_parts = hypothesis_table(kaldi_style_scored(nbest_lattice(nbest, lattice), rnn, 4, options))
    assert words == kaldi_words == [list(h.words) for h in nbest.hypotheses]
    column = 2  # acoustic, old_lm, new_lm, unk, words
    assert torch.allclose(parts[:, column], kaldi_parts[:, column], atol=1e-4)
    true = sentence_logprobs(rnn, words)
    assert torch.allclose(parts[:, column], torch.tensor(true, dtype=torch.float64), atol=1e-6)
    assert parts[:, 0].tolist() == pytest.approx([h.scores["acoustic"] for h in nbest.hypotheses])


def test_the_line_searches_best_path_is_afp_rescores_decision(world):
    """The joint search's view of a lattice (afp.mert.LatticeLines, built as afp.tune.lattice_lines
    builds it) picks the best path that rescore_scored (what afp rescore returns) picks, at every
    point tried: its errors_of here numbers each distinct word sequence, so the "errors" it
    reports at a point name the words of its best path."""
    from afp import load_model
    from afp.mert import LatticeLines
    from afp.options import build_options
    from afp.tune import path_words, weight_vector
    from lattices.rescore import rescore_scored, score_for_options

    model = load_model(world["afp"], device="cpu")
    base = build_options({}, unk_default=model.loaded.default_unk_penalty)
    for name, key in (("dev_clean", KEYS[1]), ("dev_other", KEYS[3])):
        (lattice,) = read_lattice_file(world["root"] / "sets" / name / "lattices" / f"{key}.slf")
        scored = score_for_options(lattice, model.scorer, base)
        sequences: list[tuple[str, ...]] = []

        def number_of(arcs, scored=scored, sequences=sequences) -> int:
            words = tuple(path_words(scored, arcs))
            if words not in sequences:
                sequences.append(words)
            return sequences.index(words)

        lines = LatticeLines(scored.dag(weight_vector(scored, base)), scored.arc_parts.cpu().numpy(),
                             scored.final_parts.cpu().numpy(),
                             lambda point, scored=scored: weight_vector(scored, base.at_point(point)).cpu().numpy(),
                             number_of)
        seen = set()
        for point in ({"lm_weight": 0.0, "old_lm_weight": 1.0, "word_penalty": 0.0, "unk_penalty": 0.0},
                      {"lm_weight": 1.0, "old_lm_weight": 0.0, "word_penalty": 2.0, "unk_penalty": -5.0},
                      {"lm_weight": 3.0, "old_lm_weight": 0.5, "word_penalty": -4.0, "unk_penalty": -20.0}):
            words = list(sequences[lines.errors(point)])
            assert words == rescore_scored(scored, base.at_point(point))[0].best.words
            seen.add(tuple(words))
        assert len(seen) > 1  # the points make different decisions: the comparison could fail
