"""The FastAPI app in-process: every endpoint, every error case, batching, auth, fuzzing."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afp.compare import compare_answers
from lattices.formats import read_json_value, read_lattices, write_lattices
from lattices.formats.jsonfmt import lattice_to_json
from lattices.formats.k2 import k2_dict_from_json, k2_dict_to_json, read_k2, write_k2
from lattices.lattice import Lattice
from lm.checkpoint import load_checkpoint
from lm.corpus import encode
from lm.evaluate import score_corpus
from lm.scorer import LMScorer
from service.app import create_app
from afp.batching import BatchingScorer
from service.settings import Settings
from tests.factories import WORDS, all_paths, saved_model, tiny_vocab
from tests.lattices.test_json import valid_objects
from tests.service.test_rescore_cli import ARCHIVE

SLF = """VERSION=1.0
UTTERANCE=slf1
lmscale=10.0 wdpenalty=0.0
N=4 L=4
I=0 t=0.0 W=!NULL
I=1 t=0.5 W=the
I=2 t=0.5 W=a
I=3 t=1.0 W=cat
J=0 S=0 E=1 a=-100 l=-1.0
J=1 S=0 E=2 a=-101 l=-1.2
J=2 S=1 E=3 a=-50 l=-2.0
J=3 S=2 E=3 a=-50 l=-2.0
"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("m") / "model", cell="lstm", mode="afp", rho=2)


def client_for(model_dir, **overrides):
    """An in-process client of the app; its request work in its threads unless ``processes`` says otherwise."""
    overrides.setdefault("processes", 1)
    return TestClient(create_app(Settings(model_dir=model_dir, **overrides)))


@pytest.fixture(scope="module")
def client(model_dir):
    with client_for(model_dir, batching=True, batch_max_wait_ms=1.0) as c:
        yield c


VOLATILE = {"seconds", "timing"}  # wall-clock times: the only fields two doors may differ in beyond the tolerance


def library_answer(library, payload, fmt: str, symbols=None, **options) -> list:
    """What the Python API (``afp.Model.rescore``: the path ``afp rescore`` takes) answers for the
    lattices of a request's ``payload`` in ``fmt`` with the same options: one
    :class:`~lattices.rescore.RescoreResult` per lattice and LM weight."""
    import warnings

    from service.engine import SOURCE  # a lattice without a key of its own is named after its source

    lattices = read_lattices(payload, fmt, symbols, source=SOURCE) if isinstance(payload, str) else read_json_value(
        payload, fmt, symbols, source=SOURCE)
    with warnings.catch_warnings():  # the untuned-weights warning: the server gives it as a "warnings" entry
        warnings.simplefilter("ignore", UserWarning)
        return [result for per_lattice in library.rescore(lattices, **options) for result in per_lattice]


def assert_same_answer(rows: list[dict], expected: list) -> None:
    """The HTTP answer's results are the library's (``afp rescore --json``'s lines): every field of
    the library's line is there (what the answer has beyond it is null: a field the library leaves
    out when it has nothing to say), the keys and words (best, n-best, first pass) exactly, and every
    score within :data:`afp.compare.SCORE_TOLERANCE`."""
    want = [result.to_json() for result in expected]
    assert [sorted(set(w) - set(row)) for row, w in zip(rows, want)] == [[]] * len(want), "fields the answer lacks"
    assert [{k: row[k] for k in set(row) - set(w) - {"lattice"} if row[k] is not None}
            for row, w in zip(rows, want)] == [{}] * len(want)
    assert [(r["key"], r["best"]["words"], [h["words"] for h in r["nbest"]]) for r in rows] == [
        (w["key"], w["best"]["words"], [h["words"] for h in w["nbest"]]) for w in want]
    found = compare_answers(want, rows, ignore=VOLATILE)
    assert found.same, found.difference


def test_health_ready_models(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
    (info,) = client.get("/v1/models").json()["models"]
    assert info["rho"] == 2 and info["cell"] == "lstm" and info["vocab_size"] == tiny_vocab().size
    cuda = torch.cuda.is_available()  # the module's server runs on the default device (auto)
    assert info["device"] == ("cuda:0" if cuda else "cpu") and info["batching"] is True
    assert info["score_precision"] == ("bf16" if cuda else "fp32")  # auto: bf16 only on CUDA


@pytest.mark.parametrize(("setting", "cpu", "cuda"), [(None, False, True), (True, True, True), (False, False, False)])
def test_batching_defaults_to_on_for_cuda_only(setting, cpu, cuda):
    settings = Settings(batching=setting)
    assert (settings.batching_on("cpu"), settings.batching_on("cuda")) == (cpu, cuda)


def test_batching_auto_is_off_when_serving_on_cpu(model_dir):
    with client_for(model_dir, device="cpu") as c:
        (info,) = c.get("/v1/models").json()["models"]
    assert info["device"] == "cpu" and info["batching"] is False


def test_rescore_kaldi_archive_gives_one_result_per_lattice(client, model_dir):
    r = client.post("/v1/rescore", json={"format": "kaldi", "lattice": ARCHIVE, "nbest": 2})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["key"] for x in results] == ["utt1", "utt2"]
    assert results[1]["best"]["words"] == ["the", "dog", "ran"]
    loaded = load_checkpoint(model_dir)
    expected = score_corpus(loaded.model, encode([h["words"] for h in results[0]["nbest"]], loaded.vocab))
    for hyp, lp in zip(results[0]["nbest"], expected.token_logprobs):
        assert hyp["lm_logprob"] == pytest.approx(float(lp.sum()), abs=1e-4)


def test_raw_text_body_with_query_options(client):
    r = client.post("/v1/rescore?nbest=2&lm_weight=0&lm_weight=1", content=ARCHIVE,
                    headers={"content-type": "text/plain"})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [(x["key"], x["lm_weight"]) for x in results] == [("utt1", 0.0), ("utt1", 1.0), ("utt2", 0.0), ("utt2", 1.0)]
    assert len(results[0]["nbest"]) == 2
    slf = client.post("/v1/rescore", content=SLF, headers={"content-type": "text/plain"})
    assert slf.status_code == 200 and slf.json()["results"][0]["acoustic_scale"] == pytest.approx(0.1)
    bad = client.post("/v1/rescore?nbets=2", content=ARCHIVE, headers={"content-type": "text/plain"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "nbets"


@pytest.mark.parametrize("fmt", ["kaldi", "htk", "json", "openfst", "k2"])
def test_every_format_round_trips_through_return_lattice(client, library, fmt):
    """The SLF lattice sent in each format with ``return_lattice``: the answer is the Python API's
    for the same input (words and scores), and the lattice that comes back, read again, is the
    API's rescored lattice written in that format: the same states, arcs and words in the same
    order, the same scores, and the same complete paths with the same totals as the API's own."""
    (source,) = read_lattices(SLF, "htk")
    payload = {"htk": SLF, "kaldi": read_text("kaldi", source), "openfst": read_text("openfst", source),
               "json": lattice_to_json(source), "k2": k2_dict_to_json(write_k2([source]))}[fmt]
    words, symbols = None, None
    if fmt in ("openfst", "k2"):  # integer labels: send the symbol table
        payload = payload if fmt == "k2" else read_text("openfst", source, ids=True)
        words, symbols = "".join(f"{w} {i}\n" for i, w in enumerate(source.symbols)), source.symbols
    r = client.post("/v1/rescore", json={"format": fmt, "lattice": payload, "words": words, "return_lattice": True})
    assert r.status_code == 200, r.text
    (expected,) = library_answer(library, payload, fmt, symbols, return_lattice=True)
    assert_same_answer(r.json()["results"], [expected])
    (result,) = r.json()["results"]
    assert expected.lattice is not None and result["lattice"] is not None
    (back,) = read_back(result["lattice"], fmt, source.symbols)
    (want,) = read_back(written(expected.lattice, fmt), fmt, source.symbols)
    assert (back.key, back.num_states, back.start) == (want.key, want.num_states, want.start)
    for name in ("src", "dst", "words", "finals"):
        assert getattr(back, name).tolist() == getattr(want, name).tolist(), name
    scores = ("acoustic", "graph", "final_acoustic", "final_graph")
    found = compare_answers({n: getattr(want, n).tolist() for n in scores}, {n: getattr(back, n).tolist() for n in scores})
    assert found.same, found.difference
    # the round trip keeps every path: its words and its total score (openfst writes one weight, their sum)
    found = compare_answers(path_totals(expected.lattice), path_totals(back))
    assert found.same, found.difference


def written(lattice: Lattice, fmt: str):
    """``lattice`` in ``fmt`` as a request's answer carries it (text, or the JSON and k2 objects)."""
    if fmt == "json":
        return lattice_to_json(lattice)
    if fmt == "k2":
        return k2_dict_to_json(write_k2([lattice]))
    return write_lattices([lattice], fmt).decode()


def read_back(value, fmt: str, symbols) -> list[Lattice]:
    if fmt == "k2":
        return read_k2(k2_dict_from_json(value), symbols=symbols)
    if fmt == "json":
        return read_lattices(json.dumps(value), "json")
    return read_lattices(value, fmt, symbols=symbols)


def path_totals(lattice: Lattice) -> list[tuple[list[str], float]]:
    """Every complete path's words and its acoustic plus graph score (final weights included), sorted."""
    out = []
    for arcs, final in all_paths(lattice):
        words = [lattice.word(a) for a in arcs if int(lattice.words[a]) != 0]
        total = float(lattice.acoustic[arcs].sum() + lattice.graph[arcs].sum()
                      + lattice.final_acoustic[final] + lattice.final_graph[final])
        out.append((words, total))
    assert out, lattice
    return sorted(out)


def read_text(fmt, lattice, ids=False):
    from lattices.formats.kaldi import write_kaldi
    from lattices.formats.openfst import write_openfst

    return write_kaldi([lattice]) if fmt == "kaldi" else write_openfst(lattice, use_ids=ids)


def test_perplexity_matches_the_sentence_forward_pass(client, model_dir):
    sentences = ["the cat sat on the mat", "a zebra ran", "dog"]
    r = client.post("/v1/perplexity", json={"sentences": sentences})
    assert r.status_code == 200
    body = r.json()
    loaded = load_checkpoint(model_dir)
    expected = score_corpus(loaded.model, encode([s.split() for s in sentences], loaded.vocab))
    assert body["ppl"] == pytest.approx(expected.ppl, rel=1e-6)
    assert body["tokens"] == 7 + 4 + 2 and body["oov"] == 1
    assert [s["tokens"] for s in body["per_sentence"]] == [7, 4, 2]


@pytest.mark.parametrize("request_body, kind, where", [
    ({"format": "kaldi", "lattice": "utt\n0 1 the 1,zz,\n1\n"}, "lattice_format", "line"),
    ({"format": "htk", "lattice": "N=2 L=1\nI=0\nJ=0 S=0 E=5\n"}, "lattice_format", "line"),
    ({"format": "json", "lattice": {"key": "x", "start": 0, "arcs": [[0, 1, "a", "x", 0]], "finals": [[1, 0, 0]]}},
     "lattice_format", "field"),
    ({"format": "k2", "lattice": "0 1 2 3"}, "invalid_request", "field"),
    ({"format": "k2", "lattice": {"arcs": [[0, 1]]}}, "lattice_format", "field"),
    ({"format": "kaldi", "lattice": ARCHIVE, "nbest": 0}, "invalid_request", "field"),
    ({"format": "kaldi", "lattice": ARCHIVE, "nbest": 10_000}, "invalid_request", "field"),
    ({"format": "kaldi", "lattice": ARCHIVE, "colour": "red"}, "invalid_request", "field"),
    ({"format": "xml", "lattice": ARCHIVE}, "invalid_request", "field"),
    ({"format": "kaldi", "lattice": "u\n0 1 7 1,2,\n1\n"}, "lattice_format", "line"),
    ({"format": "kaldi", "lattice": ARCHIVE, "words": "a b c\n"}, "invalid_request", "field"),
])
def test_bad_requests_are_422_with_location(client, request_body, kind, where):
    r = client.post("/v1/rescore", json=request_body)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["kind"] == kind and error.get(where) is not None and error["message"]


def test_body_limits_and_size_limits(model_dir):
    with client_for(model_dir, max_body_bytes=200, max_lattice_arcs=3, max_expanded_arcs=5) as c:
        big = c.post("/v1/rescore", json={"format": "kaldi", "lattice": ARCHIVE * 3})
        assert big.status_code == 413 and big.json()["error"]["kind"] == "too_large"

        def chunks():  # no Content-Length: counted while streaming
            for _ in range(10):
                yield b"x" * 50

        streamed = c.post("/v1/rescore", content=chunks(), headers={"content-type": "text/plain"})
        assert streamed.status_code == 413
    with client_for(model_dir, max_lattice_arcs=3) as c:
        r = c.post("/v1/rescore", json={"format": "kaldi", "lattice": ARCHIVE})
        assert r.status_code == 422 and "4 arcs" in r.json()["error"]["message"]
    with client_for(model_dir, max_expanded_arcs=5) as c:
        r = c.post("/v1/rescore", json={"format": "kaldi", "lattice": ARCHIVE, "prune_if_too_large": False})
        assert r.status_code == 422 and r.json()["error"]["kind"] == "expansion_budget"
        assert "budget of 5 arcs" in r.json()["error"]["message"]
        pruned = c.post("/v1/rescore", json={"format": "kaldi", "lattice": ARCHIVE, "prune_if_too_large": True})
        assert pruned.status_code == 200
        result = pruned.json()["results"][0]
        assert result["pruned"]["arcs_before"] == 4  # ARCHIVE's utt1
        assert result["pruned"]["arcs_after"] < result["pruned"]["arcs_before"]
        assert result["lattice_arcs"] == result["pruned"]["arcs_after"]  # the lattice that was expanded
        assert result["expanded_arcs"] <= 5


def test_bearer_token(model_dir):
    with client_for(model_dir, auth_token="s3cret") as c:
        assert c.post("/v1/perplexity", json={"sentences": ["a"]}).status_code == 401
        wrong = c.post("/v1/perplexity", json={"sentences": ["a"]}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["error"]["kind"] == "unauthorized"
        ok = c.post("/v1/perplexity", json={"sentences": ["a"]}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert c.get("/healthz").status_code == 200 and c.get("/readyz").status_code == 200


def test_cors_is_off_by_default_and_on_when_configured(client, model_dir):
    headers = {"Origin": "https://example.org", "Access-Control-Request-Method": "POST"}
    assert "access-control-allow-origin" not in client.options("/v1/rescore", headers=headers).headers
    with client_for(model_dir, cors_origins=["https://example.org"]) as c:
        r = c.options("/v1/rescore", headers=headers)
        assert r.headers.get("access-control-allow-origin") == "https://example.org"


def test_openapi_documents_both_body_types(client):
    spec = client.get("/openapi.json").json()
    body = spec["paths"]["/v1/rescore"]["post"]["requestBody"]["content"]
    assert set(body) == {"application/json", "text/plain"}
    assert "examples" in spec["components"]["schemas"]["RescoreRequest"]
    assert "/v1/perplexity" in spec["paths"] and "/v1/models" in spec["paths"]


def hold_first_call(batcher: BatchingScorer, calls: int) -> threading.Event:
    """Make ``batcher``'s first model call wait until ``calls`` score calls have been queued (a
    condition, not a time window): the first model call takes some of them, and the next one all
    the rest, already waiting. Returns an event set once the first call has let go; waits at most
    60 s for the calls to arrive."""
    inner_score, released, queue = batcher.inner.score, threading.Event(), batcher._queue
    put, arrived = queue.put, []

    def counted_put(item, *args, **kwargs):
        arrived.append(item)
        put(item, *args, **kwargs)

    def score(*args):
        if not released.is_set():
            deadline = time.monotonic() + 60
            while len(arrived) < calls and time.monotonic() < deadline:
                time.sleep(0.001)
            released.set()
        return inner_score(*args)

    queue.put = counted_put  # type: ignore[method-assign]
    batcher.inner.score = score  # type: ignore[method-assign]
    return released


def test_concurrent_requests_share_batches_and_keep_results_apart(model_dir):
    with client_for(model_dir, batching=True, batch_max_wait_ms=1.0, workers=8) as c:
        solo = [c.post("/v1/perplexity", json={"sentences": [s]}).json() for s in ("the cat", "a big red dog")]
        released = hold_first_call(c.app.state.runtime.scorer, calls=8)
        results = {}

        def ask(i):
            results[i] = c.post("/v1/perplexity", json={"sentences": ["the cat" if i % 2 else "a big red dog"]}).json()

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert released.is_set()
        for i, body in results.items():
            assert body["ppl"] == pytest.approx(solo[i % 2 == 0 and 1 or 0]["ppl"], rel=1e-9)
        metrics = c.get("/metrics").text
    merged = [line for line in metrics.splitlines() if line.startswith("afp_batch_requests_bucket")]
    single = next(float(line.split()[-1]) for line in merged if 'le="1.0"' in line)
    total = next(float(line.split()[-1]) for line in merged if 'le="+Inf"' in line)
    assert total > single  # at least one model call served several requests at once
    assert 'afp_requests_total{route="/v1/perplexity",status="200"}' in metrics
    assert "afp_requests_in_progress 1.0" in metrics  # the scrape itself; every other request is done


def test_batching_scorer_merges_and_splits_exactly(model_dir):
    loaded = load_checkpoint(model_dir)
    inner = LMScorer(loaded)
    calls = []
    batcher = BatchingScorer(inner, enabled=True, max_wait=0.001, on_batch=lambda r, p: calls.append((r, p)))
    hold_first_call(batcher, calls=6)  # the first model call waits until all six are queued
    try:
        jobs = []
        for n in range(6):
            width = 1 + n % 2
            contexts = torch.randint(0, loaded.vocab.size, (n + 2, width))
            lengths = torch.full((n + 2,), width)
            targets = torch.randint(0, loaded.vocab.size, (3 * (n + 2),))
            owner = torch.arange(n + 2).repeat(3)
            jobs.append((contexts, lengths, targets, owner))
        outputs = [None] * len(jobs)

        def run(i):
            outputs[i] = batcher.score(*jobs[i])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for job, out in zip(jobs, outputs):
            assert torch.allclose(out, inner.score(*job), atol=1e-6)
        # the held first call (whatever it had collected), then all the rest at once: at most two calls
        assert len(calls) <= 2 and sum(r for r, _ in calls) == 6 and max(r for r, _ in calls) >= 3
        assert sum(p for _, p in calls) == sum(len(j[2]) for j in jobs)
    finally:
        batcher.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(st.one_of(
    st.dictionaries(st.sampled_from(["format", "lattice", "nbest", "lm_weight", "old_lm_weight", "acoustic_scale",
                                     "words", "return_lattice", "prune_beam", "posteriors", "x"]),
                    st.one_of(st.text(max_size=30), st.integers(-5, 10**6), st.floats(allow_nan=False, allow_infinity=False),
                              st.booleans(), st.none(), st.lists(st.integers(-3, 3), max_size=4),
                              st.sampled_from(["kaldi", "htk", "json", "k2", "openfst", "auto", ARCHIVE, SLF])),
                    max_size=6),
    st.builds(lambda fmt, text: {"format": fmt, "lattice": text},
              st.sampled_from(["kaldi", "htk", "openfst", "auto"]), st.text(alphabet="0123 \nabc.,=-IJNLSEWa", max_size=80)),
))
def test_fuzzed_rescore_bodies_never_5xx(client, body):
    # far below the body limit (413 only above it; no Content-Encoding, so no decompression limit
    # either): a 413 here would be a wrong answer, not a limit
    assert len(json.dumps(body).encode()) < client.app.state.settings.max_body_bytes // 1000
    r = client.post("/v1/rescore", json=body)
    assert r.status_code in (200, 422), (body, r.text)


def word_sequences(obj: dict) -> set[tuple[str, ...]]:
    """Every start-to-final word sequence of a (small, acyclic) JSON lattice, epsilons dropped."""
    finals, out = {f[0] for f in obj["finals"]}, set()

    def walk(state: int, words: tuple[str, ...]) -> None:
        if state in finals:
            out.add(words)
        for src, dst, word, _, _ in obj["arcs"]:
            if src == state:
                walk(dst, words + (() if word in (None, "<eps>") else (word,)))

    walk(obj["start"], ())
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(valid_objects())
def test_fuzzed_valid_lattices_get_one_of_their_own_paths(client, obj):
    """A valid generated lattice (words of the model's vocabulary) is answered 200, and its best
    path is one of its own word sequences, its n-best distinct ones."""
    vocab = WORDS
    for arc in obj["arcs"]:
        if arc[2] not in (None, "<eps>"):
            arc[2] = vocab[sum(map(ord, arc[2])) % len(vocab)]
        arc[3], arc[4] = float(arc[3]) / 1e4, float(arc[4]) / 1e4  # keep the scores in a sane range
    r = client.post("/v1/rescore", json={"format": "json", "lattice": obj, "nbest": 3})
    assert r.status_code == 200, (obj, r.text)
    (result,) = r.json()["results"]
    sequences = word_sequences(obj)
    assert result["key"] == obj["key"] and tuple(result["best"]["words"]) in sequences
    nbest = [tuple(h["words"]) for h in result["nbest"]]
    assert nbest[0] == tuple(result["best"]["words"]) and len(set(nbest)) == len(nbest) == min(3, len(sequences))
    assert set(nbest) <= sequences


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(st.binary(max_size=200), st.sampled_from(["text/plain", "application/json", "application/octet-stream"]))
def test_fuzzed_raw_bodies_never_5xx(client, raw, content_type):
    assert len(raw) <= 200 < client.app.state.settings.max_body_bytes  # no 413: that is for bodies over the limit
    for path in ("/v1/rescore", "/v1/perplexity"):
        r = client.post(path, content=raw, headers={"content-type": content_type})
        assert r.status_code in (200, 422), (path, raw, r.text)
        if r.status_code != 200:
            assert r.json()["error"]["message"]


def test_non_finite_numbers_in_raw_json_are_refused(client):
    r = client.post("/v1/rescore", content=json.dumps({"lattice": ARCHIVE, "lm_weight": float("nan")}),
                    headers={"content-type": "application/json"})
    assert r.status_code == 422 and "finite" in r.json()["error"]["message"]
    assert client.get("/nowhere").json()["error"]["kind"] == "http_error"


def test_request_over_the_time_limit_is_503(model_dir):
    from tests.service.test_server_process import sausage

    # a microsecond: no request can be answered within it on any machine, so the 503 is certain
    with client_for(model_dir, request_timeout_s=1e-6) as c:
        r = c.post("/v1/rescore", json={"format": "json", "lattice": sausage(150, 10), "nbest": 50})
        assert r.status_code == 503 and r.json()["error"]["kind"] == "timeout"
        assert c.get("/healthz").status_code == 200  # the server goes on


def test_a_timed_out_request_keeps_its_worker_slot_until_its_work_stops(model_dir, monkeypatch):
    """The 503 comes at the timeout, but the slot is given back only when the thread's work ends;
    a request that finds no free slot before its deadline is answered 503 and its work never runs."""
    import time

    import service.routes.rescore as route

    release, calls = threading.Event(), []

    def stuck(request, runtime, deadline=None):  # work that ignores its deadline until released
        calls.append(deadline)
        release.wait(30)
        return [], []

    monkeypatch.setattr(route, "rescore_request", stuck)
    with client_for(model_dir, request_timeout_s=0.2, workers=1) as c:
        limiter = c.app.state.limiter
        body = {"format": "json", "lattice": json.loads(json.dumps({"key": "k", "arcs": []}))}
        assert c.post("/v1/rescore", json=body).json()["error"]["kind"] == "timeout"
        assert limiter.borrowed_tokens == 1  # the thread still runs: its slot stays taken
        assert c.post("/v1/rescore", json=body).json()["error"]["kind"] == "timeout"
        assert len(calls) == 1 and calls[0] is not None  # the second request's work never started
        release.set()
        for _ in range(1000):  # the slot comes back once the thread ends
            if limiter.borrowed_tokens == 0:
                break
            time.sleep(0.01)
        assert limiter.borrowed_tokens == 0
        assert c.post("/v1/rescore", json=body).json() == {"results": [], "warnings": []}
        assert len(calls) == 2 and c.get("/healthz").status_code == 200


def test_freed_memory_is_given_back_when_the_last_request_ends(client, monkeypatch):
    import service.engine as engine

    calls = []
    monkeypatch.setattr(engine, "release_memory", lambda: calls.append(True) or True)
    assert client.post("/v1/rescore", json={"lattice": SLF, "nbest": 1}).status_code == 200
    assert calls  # nothing else was running: the heap was trimmed
