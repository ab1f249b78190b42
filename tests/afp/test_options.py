"""The one options builder (afp.options.build_options) and what it fills in: its defaults are
RescoreOptions' own, resolved on a lattice to numbers a reader can check by hand."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from afp.options import OptionsError, OptionValueError, build_options, parse_score_weights
from afp.weights import TunedWeights
from lattices.formats import read_lattices
from lattices.rescore import DEFAULT_LM_WEIGHT, DEFAULT_MAX_EXPANDED_ARCS, RescoreOptions, reduction, rescore
from lattices.scored import WeightError
from service.cli import main
from tests.factories import make_model, saved_model, tiny_vocab
from lm.checkpoint import LoadedModel, save_checkpoint
from lm.scorer import LMScorer

REPO = Path(__file__).resolve().parents[2]
# one path per word choice; graph costs make "the cat" the first pass's choice
LATTICE = "u\n0 1 the 1,10,\n0 1 a 3,10,\n1 2 cat 1,10,\n2\n\n"


# ------------------------------------------------------- each door, given nothing, gives the engine's defaults
UNK_TYPES = 7  # the door tests' model mapped 7 distinct training words to <unk>: its own penalty is -log 7


@pytest.fixture(scope="module")
def unk_model(tmp_path_factory) -> Path:
    """A model whose own unknown-word penalty is not 0 (-log 7), and a lattice, its references and
    a CutSet of it beside it."""
    root = tmp_path_factory.mktemp("doors")
    vocab = tiny_vocab()
    save_checkpoint(root / "model", make_model(vocab, cell="gru", mode="afp", rho=2), vocab, {"unk_types": UNK_TYPES})
    (root / "lat.txt").write_text(LATTICE)
    (root / "refs.txt").write_text("u the cat\n")
    return root / "model"


def engine_defaults() -> RescoreOptions:
    """What every door must build from no option: ``RescoreOptions``' own defaults, with the model's
    unknown-word penalty filled in (the one thing the engine cannot know)."""
    return RescoreOptions(unk_penalty=-math.log(UNK_TYPES))


def test_afp_rescore_without_flags_uses_the_engines_defaults(unk_model, monkeypatch):
    """``afp rescore`` given only its input hands the engine its defaults (and flags that are not
    given add nothing of their own: no argparse default stands in for the engine's)."""
    seen = []

    def capture(lattices, scorer, options, **kwargs):
        seen.append(options)
        return iter(())

    monkeypatch.setattr("afp.jobs.rescore_all", capture)
    assert main(["rescore", "--model", str(unk_model), "--device", "cpu", str(unk_model.parent / "lat.txt")]) == 0
    assert seen == [engine_defaults()]


def test_afp_tune_without_flags_uses_the_engines_defaults(unk_model):
    """``afp tune``'s tuner (what its search starts from) as the command makes it."""
    from afp.tune_job import load_tuner
    from afp.wer import read_references
    from service.cli import _tune_job, build_parser

    root = unk_model.parent
    args = build_parser().parse_args(["tune", "--model", str(unk_model), "--device", "cpu", "--refs",
                                      str(root / "refs.txt"), str(root / "lat.txt")])
    args.argv = []
    job = _tune_job(args)
    assert load_tuner(job, read_references(job.refs)).options == engine_defaults()


def test_afp_rescore_cuts_without_flags_uses_the_engines_defaults(unk_model, monkeypatch, capsys):
    seen = []

    def capture(cuts, out, ready, *args, **kwargs):
        seen.append(ready.options)
        return {"cuts": 0, "failed": 0}

    monkeypatch.setattr("afp.cuts.rescore_cuts", capture)
    assert main(["rescore-cuts", "--model", str(unk_model), "--device", "cpu", "--cuts", "c.jsonl",
                 "--out", "o.jsonl"]) == 0
    assert seen == [engine_defaults()]


def test_an_http_request_without_options_uses_the_engines_defaults(unk_model, monkeypatch):
    """``POST /v1/rescore`` with a lattice and no option field, on a server with its default
    settings (whose budgets are the engine's: AFP_MAX_EXPANDED_ARCS, AFP_TARGET_EXPANDED_ARCS)."""
    import service.engine
    from tests.service.test_app import client_for

    seen = []

    def capture(lattice, scorer, options, **kwargs):
        seen.append(options)
        return rescore(lattice, scorer, options, **kwargs)

    monkeypatch.setattr(service.engine, "rescore", capture)
    with client_for(unk_model) as client:
        r = client.post("/v1/rescore", json={"lattice": LATTICE})
    assert r.status_code == 200, r.text
    assert [dataclasses.replace(o, deadline=None) for o in seen] == [engine_defaults()]


def test_the_python_api_without_options_uses_the_engines_defaults(unk_model, monkeypatch):
    """:meth:`afp.Model.rescore` with no option, and :func:`afp.rescore_options`, which says what it uses."""
    import afp
    import afp.api

    seen = []

    def capture(lattices, scorer, options, **kwargs):
        seen.append(options)
        return iter(())

    monkeypatch.setattr(afp.api, "rescore_all", capture)
    model = afp.load_model(unk_model, device="cpu")
    assert model.rescore(str(unk_model.parent / "lat.txt")) == []
    assert seen == [engine_defaults()] and afp.rescore_options(model) == engine_defaults()
    assert afp.rescore_options(model, unk_penalty=-1).unk_penalty == -1.0


def test_the_untuned_default_resolves_to_a_quarter_of_the_old_lm_weight():
    """On a lattice (no recogniser weights in the input) the old LM is kept at 1 and the new LM
    weighs DEFAULT_LM_WEIGHT = 0.25; an n-best list's recovered weight is covered by the parity test."""
    vocab = tiny_vocab()
    model = make_model(vocab, cell="gru", mode="afp", rho=2)
    scorer = LMScorer(LoadedModel(model.config, vocab, model))
    (lattice,) = read_lattices(LATTICE, "kaldi")
    (result,) = rescore(lattice, scorer, build_options({}))
    assert (result.lm_weight, result.old_lm_weight, result.word_penalty, result.unk_penalty) == (0.25, 1.0, 0.0, 0.0)
    assert DEFAULT_LM_WEIGHT == 0.25
    (given,) = rescore(lattice, scorer, build_options({"lm_weight": 0.7}))
    assert given.lm_weight == 0.7 and given.old_lm_weight == 1.0  # a given weight is absolute


def test_door_names_and_field_names():
    options = build_options({"lm_weight": [0.5, 1], "max_arcs": 99, "prune_if_too_large": True,
                             "score_weights": "decoder=0.6, ctc=0.4", "nbest": 3, "posteriors": None})
    assert options.lm_weights == (0.5, 1.0) and options.max_expanded_arcs == 99 and options.auto_prune
    assert dict(options.score_weights) == {"decoder": 0.6, "ctc": 0.4} and options.nbest == 3
    assert not options.posteriors  # None: not given
    assert build_options({"lm_weights": (2.0,), "score_weights": {"a": 1}}).lm_weights == (2.0,)


@pytest.mark.parametrize("given, error, field", [
    ({"lm_wieght": 1}, OptionsError, "lm_wieght"),
    ({"score_weights": "decoder"}, OptionsError, "score_weights"),
    ({"lm_weight": -1}, WeightError, "lm_weight"),
    ({"lm_weight": []}, WeightError, "lm_weight"),
    ({"old_lm_weight": float("nan")}, WeightError, "old_lm_weight"),
])
def test_bad_options_name_the_field(given, error, field):
    with pytest.raises(error) as caught:
        build_options(given)
    assert caught.value.field == field


def test_parse_score_weights():
    assert parse_score_weights("") == {}
    assert parse_score_weights("a=1,b=-0.5") == {"a": 1.0, "b": -0.5}
    with pytest.raises(OptionsError, match="NAME=WEIGHT"):
        parse_score_weights("a=1,=2")


def test_a_weights_file_and_the_callers_fields():
    tuned = TunedWeights(lm_weight=0.4, old_lm_weight=0.6, word_penalty=0.5, unk_penalty=-4.0,
                         score_weights={"decoder": 0.7}, decode="mbr")
    applied = build_options({"nbest": 2}, weights=tuned, unk_default=-9.0)
    assert (applied.lm_weights, applied.old_lm_weight, applied.word_penalty, applied.unk_penalty) == ((0.4,), 0.6, 0.5, -4.0)
    assert dict(applied.score_weights) == {"decoder": 0.7} and applied.decode == "mbr" and applied.nbest == 2
    with pytest.raises(OptionsError, match="not both"):  # the command line and the Python API
        build_options({"lm_weight": 1.0}, weights=tuned)
    refined = build_options({"lm_weight": 1.0}, weights=tuned, fields_win=True)  # HTTP: the request's own field wins
    assert refined.lm_weights == (1.0,) and refined.old_lm_weight == 0.6
    server = build_options({"old_lm_weight": 0.2}, default_weights=tuned)  # AFP_WEIGHTS lies under the request
    assert server.old_lm_weight == 0.2 and server.lm_weights == (0.4,)


def test_a_weights_file_that_leaves_a_weight_out_leaves_it_alone():
    partial = TunedWeights.from_json({"lm_weight": 0.3}, "w.json")
    options = build_options({}, weights=partial, unk_default=-7.0)
    assert options.lm_weights == (0.3,) and options.unk_penalty == -7.0 and options.old_lm_weight is None


def test_a_saved_file_holds_every_weight(tmp_path):
    options = RescoreOptions(unk_penalty=-1.0).at_point({"lm_weight": 0.5, "old_lm_weight": 0.25, "word_penalty": 1.5,
                                                         "unk_penalty": -2.0, "score:ctc": 0.3})
    TunedWeights.from_options(options, {"wer": 1.0}).write(tmp_path / "w.json")
    data = json.loads((tmp_path / "w.json").read_text())
    assert {k: data[k] for k in ("lm_weight", "old_lm_weight", "word_penalty", "unk_penalty", "decode")} == {
        "lm_weight": 0.5, "old_lm_weight": 0.25, "word_penalty": 1.5, "unk_penalty": -2.0, "decode": "viterbi"}
    assert data["score_weights"] == {"ctc": 0.3}
    with pytest.raises(ValueError, match="one LM weight"):
        TunedWeights.from_options(RescoreOptions(lm_weights=(1.0, 2.0), old_lm_weight=1, word_penalty=0, unk_penalty=0))


def test_cli_refuses_weights_beside_weight_flags(tmp_path, capsys):
    model = saved_model(tmp_path / "model", cell="gru", mode="afp", rho=2)
    (tmp_path / "lat.txt").write_text(LATTICE)
    TunedWeights(lm_weight=0.5).write(tmp_path / "w.json")
    assert main(["rescore", "--model", str(model), "--weights", str(tmp_path / "w.json"), "--lm-weight", "1",
                 str(tmp_path / "lat.txt")]) == 2
    assert "--lm-weight, not both" in capsys.readouterr().err


# ------------------------------------------------------------------ the two expansion budgets
def test_the_two_budgets_by_door_name_and_field_name():
    assert build_options({}).target_expanded_arcs == 20_000 and build_options({}).max_expanded_arcs == 5_000_000
    options = build_options({"target_arcs": 3_000, "max_arcs": 90_000})
    assert (options.target_expanded_arcs, options.max_expanded_arcs) == (3_000, 90_000)
    assert build_options({"target_expanded_arcs": 7}).target_expanded_arcs == 7


@pytest.mark.parametrize("name", ["target_arcs", "max_arcs", "target_expanded_arcs", "max_expanded_arcs"])
@pytest.mark.parametrize("value", [-1, 2.5, 2e4, True, "20000", np.float64(3.0), np.bool_(True)])
def test_a_bad_budget_names_its_field(name, value):
    with pytest.raises(OptionValueError, match="whole number") as caught:
        build_options({name: value})
    assert caught.value.field == name and isinstance(caught.value, ValueError)
    assert str(caught.value).startswith(f"{name} must be a whole number of expanded arcs, at least 1")


@pytest.mark.parametrize("name", ["max_arcs", "max_expanded_arcs"])
def test_the_limit_is_never_zero(name):
    with pytest.raises(OptionValueError, match=f"{name} must be a whole number of expanded arcs, at least 1, got 0"):
        build_options({name: 0})


def test_the_builder_names_a_refused_value_as_the_caller_spelled_it():
    """RescoreOptions checks the budgets; the builder's message is the engine's, under the caller's name."""
    with pytest.raises(ValueError, match="max_expanded_arcs must be a whole number of expanded arcs") as direct:
        RescoreOptions(max_expanded_arcs=-1)
    with pytest.raises(OptionValueError) as built:
        build_options({"max_arcs": -1})
    assert str(built.value) == str(direct.value).replace("max_expanded_arcs", "max_arcs", 1)


def test_zero_is_no_target():
    """``target_arcs`` 0 (either spelling, any integral type) is no target: a dense lattice expands
    whole up to the limit; the limit itself is still checked."""
    for given in ({"target_arcs": 0}, {"target_expanded_arcs": np.int64(0)}, {"target_arcs": 0, "max_arcs": 90_000}):
        assert build_options(given).target_expanded_arcs is None
    assert build_options({"target_arcs": 0}) == RescoreOptions(target_expanded_arcs=None, unk_penalty=0.0)
    assert RescoreOptions(target_expanded_arcs=0).target_expanded_arcs is None
    (dense,) = read_lattices(dense_lattice_file_text(), "pocketsphinx")
    assert reduction(dense, build_options({}), 2) == (True, 20_000)
    assert reduction(dense, build_options({"target_arcs": 0}), 2) == (False, DEFAULT_MAX_EXPANDED_ARCS)
    assert reduction(dense, build_options({"target_arcs": 0, "max_arcs": 90_000}), 2) == (True, 90_000)


def test_numpy_integers_are_whole_numbers():
    """An integral number of any type (numpy's too) is accepted where an int is, and stored as an
    int; numpy numbers as weights are stored as floats (what JSON output needs)."""
    options = build_options({"nbest": np.int64(5), "max_arcs": np.int32(90_000), "target_arcs": np.uint16(3_000),
                             "mbr_nbest": np.int8(7), "max_kbest_paths": np.int64(4),
                             "max_determinized_states": np.int64(500), "lm_weight": [np.int64(1), np.float32(0.5)],
                             "old_lm_weight": np.int64(0), "score_weights": {"decoder": np.float16(0.5)}})
    assert (options.nbest, options.max_expanded_arcs, options.target_expanded_arcs, options.mbr_nbest,
            options.max_kbest_paths, options.max_determinized_states) == (5, 90_000, 3_000, 7, 4, 500)
    assert all(type(v) is int for v in (options.nbest, options.max_expanded_arcs, options.target_expanded_arcs,
                                        options.mbr_nbest, options.max_kbest_paths, options.max_determinized_states))
    assert options.lm_weights == (1.0, 0.5) and all(type(w) is float for w in options.lm_weights)
    assert options.old_lm_weight == 0.0 and type(options.old_lm_weight) is float
    assert options.score_weights == (("decoder", 0.5),) and type(options.score_weights[0][1]) is float


@pytest.mark.parametrize("name", ["nbest", "mbr_nbest", "max_kbest_paths", "max_determinized_states"])
@pytest.mark.parametrize("value", [2.5, 3.0, True, np.float64(2.0), "3", 0])
def test_a_bad_count_names_its_field(name, value):
    with pytest.raises(OptionValueError, match=f"^{name} must be a whole number") as caught:
        build_options({name: value})
    assert caught.value.field == name


def dense_lattice_file_text() -> str:
    """A real PocketSphinx lattice (2,836 links; its order-3 expansion bound is 276 times that: dense)."""
    source = sorted((REPO / "tests" / "fixtures" / "pocketsphinx").glob("*0920.slf.gz"))[0]
    return gzip.decompress(source.read_bytes()).decode()


def dense_lattice_file(tmp_path):
    """:func:`dense_lattice_file_text` in a file."""
    path = tmp_path / "utt.slf"
    path.write_text(dense_lattice_file_text())
    return path


def test_the_target_at_the_command_line(tmp_path, capsys):
    model = saved_model(tmp_path / "model", cell="gru", mode="afp", rho=2)
    lattice = dense_lattice_file(tmp_path)
    argv = ["rescore", "--model", str(model), "--format", "pocketsphinx", "--json", str(lattice)]
    assert main([*argv, "--target-arcs", "1000"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["pruned"]["budget"] == 1_000 and row["expanded_arcs"] <= 1_000
    assert [s["stage"] for s in row["stages"]] == ["input", "determinize", "minimize", "fit"]
    for bad in ("-1", "1.5", "x"):
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--target-arcs", bad])
        assert exit_.value.code == 2
        assert "--target-arcs" in capsys.readouterr().err
    assert main([*argv, "--target-arcs", "0"]) == 0  # no target: expanded whole, as a sparse lattice
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert "stages" not in row and row["pruned"] is None and row["expanded_arcs"] > 20_000


def test_the_target_flag_says_how_to_switch_it_off(capsys):
    with pytest.raises(SystemExit):
        main(["rescore", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "0: no target, dense lattices expanded whole up to --max-" in help_text  # (wrapped at its hyphen)


def test_the_target_in_the_python_api(tmp_path):
    import afp

    model = afp.load_model(saved_model(tmp_path / "model", cell="gru", mode="afp", rho=2), device="cpu")
    lattice = dense_lattice_file(tmp_path)
    ((result,),) = model.rescore(str(lattice), format="pocketsphinx", target_arcs=1_000)
    assert result.pruned["budget"] == 1_000 and result.stats["expanded_arcs"] <= 1_000
    ((default,),) = model.rescore(str(lattice), format="pocketsphinx")  # minimized, it fits 20,000 unfitted
    assert [s["stage"] for s in default.stats["stages"]] == ["input", "determinize", "minimize"]
    assert "budget" not in (default.pruned or {}) and default.stats["expanded_arcs"] <= 20_000
    with pytest.raises(ValueError, match="target_arcs must be a whole number"):
        model.rescore(str(lattice), format="pocketsphinx", target_arcs=-1)
    assert afp.rescore_options(model, target_arcs=5).target_expanded_arcs == 5
    assert afp.rescore_options(model, target_arcs=0).target_expanded_arcs is None
    ((whole,),) = model.rescore(str(lattice), format="pocketsphinx", target_arcs=0, nbest=np.int64(2),
                               max_arcs=np.int64(DEFAULT_MAX_EXPANDED_ARCS))
    assert "stages" not in whole.stats and whole.pruned is None and whole.stats["expanded_arcs"] > 20_000
    assert len(whole.nbest) == 2 and whole.best.score >= default.best.score - 1e-4  # every path of the input kept
