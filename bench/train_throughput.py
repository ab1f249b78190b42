"""Training throughput and peak memory of exact BPTT against AFP-rho, full against adaptive
softmax, at vocabularies of 10k, 33k and 200k words; and the contexts/s of the rescoring entry
point (``score_contexts``) at 200k words, full against adaptive softmax. Side by side in one run.

  python -m bench.train_throughput                                   # CPU (slow at 200k: by hand only)
  python -m bench.train_throughput --device cuda --precision bf16    # GPU, bfloat16 autocast
  python -m bench.train_throughput --quick --threads 1 --out /tmp/tt.json   # a check that it runs
  python -m bench.train_throughput --device cuda --precision bf16 --vocab-sizes 44122 --softmax adaptive \
      --modes exact cudnn afp --rhos 2 3 4 5 6 --hiddens 256 512 1024 --score-vocab-size 0 \
      --peak-tflops 989 --batch-size 64 [--compile]      # issue 49's GPU table (an H200: 989 dense bf16 TFLOP/s)

Each training row also gives its FLOPs (``torch.utils.flop_counter`` on one step, forward and
backward; a ``torch.nn.GRU`` row counts the same network's in the library's exact mode, whose
fused kernel is not counted), the TFLOP/s that makes at the median round, its fraction of
``--peak-tflops``, and its speed over ``torch.nn.GRU``'s at the same width (``cudnn`` mode: cuDNN
on a GPU), the exact recurrence a user would reach for.

Training. For every mode (exact BPTT; AFP-rho, FPI, ``--rho`` 4) x softmax (full; adaptive with
:func:`lm.config.default_cutoffs`) x V (``--vocab-sizes``), a GRU LM (``--hidden`` 256) trains
with :func:`lm.train.train_step` (forward, backward, clipping, Adam) on the same fixed sample of
``--batches`` batches of ``--batch-size`` rows x ``--bptt`` tokens. The configurations take turns,
round after round (:func:`measure`), so that machine noise hits them alike; tokens/s is that of the
median round, and each configuration is also given as a ratio to the (exact, full) configuration of
the same V (above 1: faster).

Scoring. An AFP-rho GRU at V = ``--score-vocab-size`` (200k) with a full and with an adaptive
softmax scores ``--contexts`` random contexts of rho tokens, ``--targets-per-context`` next tokens
each, in one ``score_contexts`` call (the call rescoring makes through ``lm.scorer.LMScorer``, with
its default logits budget, in float32): contexts/s of the median of ``--rounds`` calls, taken in
turns, and the ratio of adaptive to full.

Token ids. Every V uses the same kind of synthetic stream: ids drawn from a Zipf distribution
(``p(id k) ~ 1 / (k + 1) ** ZIPF_EXPONENT``, id 0 the most frequent, as in a frequency-ordered
vocabulary), one stream per V from a fixed seed. The cost of a step depends on V and, for the
adaptive softmax, on how the targets fall into its clusters, never on which words they are; a
Zipf stream gives every V (200k included, where no corpus of ``../shared/data`` has that many
word types) the same shape of distribution, with no corpus to read. With exponent 1, 74% of the
targets at V = 33,278 fall in the 2,000-id head (real English text: about 85%), so the adaptive
numbers are, if anything, slightly pessimistic. The weights are random: speed does not depend on
them.

Memory. Each configuration is built, warmed up and timed in a process of its own (started from
a ``forkserver`` that has imported torch, so starting one costs a fork, not an import), which
the parent drives one round at a time (a one-process pool), so the turn-taking is kept. Its peak is its
own: ``ru_maxrss`` (peak resident memory, MiB; ``start_rss_mib`` is what the process held before
building anything: torch itself) and, on CUDA, ``torch.cuda.max_memory_allocated``. With
``--in-process`` (and in tests) everything runs in this process and no memory is reported: a
process-wide peak cannot be told apart per configuration.

Writes ``bench/results/train_throughput_<device>.json`` and ``.png`` (``--out``). The JSON::

  {"benchmark": "bench.train_throughput", "command": "python -m bench.train_throughput ...",
   "device": "cuda:0", "device_name": "NVIDIA H100 ...", "cell": "gru", "zipf_exponent": 1.0,
   "config": {ThroughputConfig's fields},
   "train": [{"vocab_size": 10000, "mode": "exact" | "afp", "softmax": "full" | "adaptive",
              "name": "V=10000 AFP-4, adaptive softmax", "tokens_per_round": int,
              "round_seconds": [float, ...], "median_round_seconds": float, "tokens_per_second": float,
              "speedup_over_exact_full": float | null,   # tokens/s over exact full's at this V
              "start_rss_mib": float, "peak_rss_mib": float,   # isolated runs only
              "peak_cuda_mib": float}, ...],                   # isolated CUDA runs only
   "score": null | {"vocab_size": 200000, "rho": 4, "contexts": 4096, "targets_per_context": 8,
                    "rows": [{"vocab_size", "softmax", "name", "contexts_per_round", "targets_per_round",
                              "round_seconds", "median_round_seconds", "contexts_per_second",
                              "speedup_over_full": float | null, memory as above}, ...]},
   "environment": {...}}
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import multiprocessing
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from bench.common import RESULTS, command_line, environment, pyplot, save_figure, write_json

ZIPF_EXPONENT = 1.0
VOCAB_SIZES = (10_000, 33_278, 200_000)
MODES = ("exact", "afp", "cudnn")
SOFTMAXES = ("full", "adaptive")


@dataclass(frozen=True)
class ThroughputConfig:
    """What to measure and how; every CLI option.

    Fields:
      vocab_sizes, modes, softmaxes: the training grid (every combination). ``exact`` is the
        library's exact mode (a Python loop over its cell, :meth:`lm.model.RecurrentLM.exact`),
        ``cudnn`` the same network with ``torch.nn.GRU`` in place of that loop (cuDNN on a GPU):
        the baseline a user would reach for; ``afp`` is taken at every rho of ``rhos``.
      hidden, rho: the GRU's width; AFP's fixed-point iterations (scoring, and training where
        ``hiddens`` and ``rhos`` are not given).
      hiddens, rhos: the widths and the AFP iterations of the training grid (empty: ``hidden``, ``rho``).
      compile: train through ``torch.compile`` of the model.
      peak_tflops: the device's peak matrix throughput at the training precision (e.g. an H200's
        989 dense bf16): each row's measured FLOP rate (:class:`torch.utils.flop_counter.FlopCounterMode`
        on one step, forward and backward) as a fraction of it; None: the FLOP rate only.
      batch_size, bptt, batches: one round trains ``batches`` batches of ``batch_size x bptt`` tokens.
      rounds: rounds of turns (training) and calls (scoring).
      precision: ``fp32`` or ``bf16`` (autocast) training; scoring is always float32.
      score_vocab_size, contexts, targets_per_context: the scoring measurement; V 0 skips it.
      device, threads: where to run; torch threads of every process (None: torch's default).
      isolate: each configuration in a process of its own (memory reported); else all in this one.
    """

    vocab_sizes: tuple[int, ...] = VOCAB_SIZES
    modes: tuple[str, ...] = MODES
    softmaxes: tuple[str, ...] = SOFTMAXES
    hidden: int = 256
    rho: int = 4
    hiddens: tuple[int, ...] = ()
    rhos: tuple[int, ...] = ()
    compile: bool = False
    peak_tflops: float | None = None
    batch_size: int = 32
    bptt: int = 35
    batches: int = 10
    rounds: int = 5
    precision: str = "fp32"
    score_vocab_size: int = 200_000
    contexts: int = 4096
    targets_per_context: int = 8
    device: str = "cpu"
    threads: int | None = None
    isolate: bool = True

    def __post_init__(self) -> None:
        for name, allowed in (("modes", MODES), ("softmaxes", SOFTMAXES)):
            if not getattr(self, name) or not set(getattr(self, name)) <= set(allowed):
                raise ValueError(f"{name}: must be a non-empty selection of {allowed}, got {getattr(self, name)}")
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision: must be fp32 or bf16, got {self.precision!r}")
        for name in ("hidden", "rho", "batch_size", "bptt", "batches", "rounds", "contexts", "targets_per_context"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")
        for name in ("hiddens", "rhos"):
            if any(value < 1 for value in getattr(self, name)):
                raise ValueError(f"{name}: each must be at least 1, got {getattr(self, name)}")


#: ``--quick``: tiny sizes, a check that every path runs (seconds), not a measurement.
QUICK = {"vocab_sizes": (100, 300, 1000), "hidden": 16, "batch_size": 4, "bptt": 8, "batches": 2, "rounds": 2,
         "score_vocab_size": 1000, "contexts": 64, "targets_per_context": 4}


def _timed(run: Callable[[], object], device: torch.device) -> float:
    """Seconds of ``run()``, the device's queued work included."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started


def zipf_ids(vocab_size: int, count: int, generator: torch.Generator) -> Tensor:
    """int64 ``(count,)`` ids in ``[0, vocab_size)``, ``p(k) ~ (k + 1) ** -ZIPF_EXPONENT``."""
    weights = torch.arange(1, vocab_size + 1, dtype=torch.float64).pow(-ZIPF_EXPONENT)
    return torch.multinomial(weights, count, replacement=True, generator=generator)


def zipf_batches(vocab_size: int, batches: int, batch_size: int, bptt: int, seed: int) -> list[Any]:
    """``batches`` full :class:`lm.corpus.Batch` es of ``(batch_size, bptt)``: each row a slice of
    ``bptt + 1`` ids of one Zipf stream, inputs its first ``bptt``, targets its last ``bptt``."""
    from lm.corpus import Batch

    ids = zipf_ids(vocab_size, batches * batch_size * (bptt + 1), torch.Generator().manual_seed(seed))
    rows = ids.view(batches, batch_size, bptt + 1)
    lengths = torch.full((batch_size,), bptt, dtype=torch.long)
    return [Batch(r[:, :-1].contiguous(), r[:, 1:].contiguous(), lengths) for r in rows]


def _model(vocab_size: int, mode: str, softmax: str, hidden: int, rho: int, device: torch.device) -> Any:
    """The benchmark's GRU LM (:class:`lm.config.ModelConfig`), seeded, initialised, on ``device``;
    ``cudnn``: the exact model whose features come from a ``torch.nn.GRU`` over its embeddings."""
    from lm.config import ModelConfig
    from lm.model import build_model

    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=vocab_size, cell="gru", hidden=hidden,
                                    mode="afp" if mode == "afp" else "exact",
                                    rho=rho if mode == "afp" else None, softmax=softmax))
    if mode == "cudnn":
        model.cudnn = torch.nn.GRU(model.config.embedding_size, hidden, batch_first=True)
        model.cell = torch.nn.Identity()  # the library's cell is not used: no parameters of it to train
        model.features = lambda inputs, detach=False: model.cudnn(model.embedding(inputs))[0]
    model.reset_parameters(0.05)
    return model.to(device)


def _mode_name(mode: str, rho: int) -> str:
    return {"afp": f"AFP-{rho}", "exact": "exact (BPTT)", "cudnn": "exact (torch.nn.GRU)"}[mode]


def step_flops(model: Any, batch: Any, precision: str) -> int:
    """The FLOPs of one training step's forward and backward (matrix products, as
    :class:`torch.utils.flop_counter.FlopCounterMode` counts them)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        with torch.autocast(batch.inputs.device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            logprobs = model(batch.inputs, batch.targets, batch.lengths, False)
        (-logprobs.float().sum()).backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


class Setup(Protocol):
    """A configuration to time: ``prepare`` builds it on a device (warm-up included) and returns
    a function that runs one round and returns its seconds; a round processes ``units`` items."""

    @property
    def name(self) -> str: ...

    @property
    def units(self) -> int: ...

    def prepare(self, device: torch.device) -> Callable[[], float]: ...


@dataclass(frozen=True)
class TrainSetup:
    """Training one configuration: a round is ``batches`` :func:`lm.train.train_step` calls."""

    vocab_size: int
    mode: str
    softmax: str
    hidden: int
    rho: int
    batch_size: int
    bptt: int
    batches: int
    precision: str
    compile: bool = False

    @property
    def name(self) -> str:
        return f"V={self.vocab_size} H={self.hidden} {_mode_name(self.mode, self.rho)}, {self.softmax} softmax"

    @property
    def units(self) -> int:
        """Tokens per round."""
        return self.batches * self.batch_size * self.bptt

    def prepare(self, device: torch.device) -> Callable[[], float]:
        from lm.train import make_optimizer, train_step

        sample = [b.to(device) for b in zipf_batches(self.vocab_size, self.batches, self.batch_size, self.bptt,
                                                     seed=self.vocab_size)]
        # the FLOPs of the network's math: torch.nn.GRU's fused kernel is not counted, so cudnn's are exact's
        counted = _model(self.vocab_size, "exact" if self.mode == "cudnn" else self.mode, self.softmax, self.hidden,
                         self.rho, device).train()
        flops = step_flops(counted, sample[0], self.precision) * self.batches
        del counted
        model = _model(self.vocab_size, self.mode, self.softmax, self.hidden, self.rho, device).train()
        optimizer = make_optimizer(model, 1e-3)
        trainer = torch.compile(model) if self.compile else model

        def run(batches: Sequence[Any] = sample) -> float:  # one train_step per batch, clipping at 1
            return _timed(lambda: [train_step(trainer, optimizer, b, False, clip=1.0, precision=self.precision)
                                   for b in batches], device)

        run(sample[:2])  # warm-up (and compilation)
        run.flops_per_round = flops  # type: ignore[attr-defined]
        return run


@dataclass(frozen=True)
class ScoreSetup:
    """Scoring with an AFP model: a round is one ``score_contexts`` call on ``contexts`` contexts
    of ``rho`` tokens, ``targets_per_context`` targets each."""

    vocab_size: int
    softmax: str
    hidden: int
    rho: int
    contexts: int
    targets_per_context: int

    @property
    def name(self) -> str:
        return f"V={self.vocab_size} {_mode_name('afp', self.rho)} scoring, {self.softmax} softmax"

    @property
    def units(self) -> int:
        """Contexts per round."""
        return self.contexts

    def prepare(self, device: torch.device) -> Callable[[], float]:
        generator = torch.Generator().manual_seed(self.vocab_size)
        contexts = zipf_ids(self.vocab_size, self.contexts * self.rho, generator).view(self.contexts, self.rho).to(device)
        lengths = torch.full((self.contexts,), self.rho, dtype=torch.long, device=device)
        targets = zipf_ids(self.vocab_size, self.contexts * self.targets_per_context, generator).to(device)
        target_context = torch.arange(self.contexts, device=device).repeat_interleave(self.targets_per_context)
        model = _model(self.vocab_size, "afp", self.softmax, self.hidden, self.rho, device).eval()

        run = functools.partial(_timed, lambda: model.score_contexts(contexts, lengths, targets, target_context),
                                device)
        run()  # warm-up
        return run


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


#: in a worker process: its configuration's round function, device and memory
_PREPARED: dict[str, Any] = {}


def _prepare(setup: Setup, device_name: str, threads: int) -> None:
    """(In a worker process.) Build ``setup`` on the device, noting the memory held before."""
    torch.set_num_threads(threads)
    _PREPARED.update(memory={"start_rss_mib": _max_rss_mib()}, device=torch.device(device_name))
    _PREPARED["run"] = setup.prepare(_PREPARED["device"])
    _PREPARED["flops"] = _flops(_PREPARED["run"])


def _flops(run: Callable[[], float]) -> dict[str, float]:
    """``{"flops_per_round": F}`` where the setup counted them, else nothing."""
    flops = getattr(run, "flops_per_round", None)
    return {} if flops is None else {"flops_per_round": flops}


def _round() -> float:
    return _PREPARED["run"]()


def _peak_memory() -> dict[str, float]:
    """(In a worker process.) Its memory before preparing and its peaks (MiB)."""
    memory, device = _PREPARED["memory"], _PREPARED["device"]
    memory["peak_rss_mib"] = _max_rss_mib()
    if device.type == "cuda":
        memory["peak_cuda_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    return {**memory, **_PREPARED["flops"]}


class InProcess:
    """A configuration prepared and timed in this process; no memory of its own to report."""

    def __init__(self, setup: Setup, device: torch.device) -> None:
        self.round = setup.prepare(device)

    def close(self) -> dict[str, float]:
        return _flops(self.round)

    def terminate(self) -> None:
        pass


class Worker:
    """A configuration prepared and timed in a process of its own, driven round by round (an error
    there is raised here)."""

    def __init__(self, setup: Setup, device: torch.device, threads: int,
                 context: multiprocessing.context.BaseContext) -> None:
        self._pool = ProcessPoolExecutor(1, mp_context=context)
        try:
            self._pool.submit(_prepare, setup, str(device), threads).result()
        except BaseException:
            self.terminate()
            raise

    def round(self) -> float:
        return self._pool.submit(_round).result()

    def close(self) -> dict[str, float]:
        """Stop the worker; its memory (:func:`_peak_memory`)."""
        memory = self._pool.submit(_peak_memory).result()
        self._pool.shutdown()
        return memory

    def terminate(self) -> None:
        """Let the worker go (after an error elsewhere)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def measure(setups: Sequence[Setup], rounds: int, device: torch.device, threads: int, isolate: bool,
            rate_key: str, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Time ``setups`` taking turns, ``rounds`` rounds; per setup, in order: ``round_seconds``,
    ``median_round_seconds``, ``rate_key`` (units per second in the median round) and, when
    ``isolate``, the memory of its worker (:func:`_peak_memory`)."""
    context = multiprocessing.get_context("forkserver") if isolate else None  # no threads or CUDA state of this one
    if context:
        context.set_forkserver_preload(["torch", "lm.model", "lm.train"])  # a worker starts with a fork
    runners: list[InProcess | Worker] = []
    try:
        for setup in setups:
            log(f"preparing {setup.name}")
            runners.append(Worker(setup, device, threads, context) if context else InProcess(setup, device))
        times: list[list[float]] = [[] for _ in setups]
        for index in range(rounds):
            for runner, seconds in zip(runners, times, strict=True):
                seconds.append(runner.round())
            log(f"round {index + 1}/{rounds}: " + ", ".join(f"{s.name} {t[-1]:.3f}s"
                                                          for s, t in zip(setups, times, strict=True)))
        memories = [runner.close() for runner in runners]
    finally:
        for runner in runners:
            runner.terminate()
    medians = [statistics.median(seconds) for seconds in times]
    return [{"round_seconds": seconds, "median_round_seconds": median, rate_key: setup.units / median,
             **{k: round(v, 1) for k, v in memory.items()}}
            for setup, seconds, median, memory in zip(setups, times, medians, memories, strict=True)]


def flop_rates(row: dict[str, Any], peak_tflops: float | None) -> dict[str, float]:
    """A measured row's ``tflops`` (its counted FLOPs over its median round) and, with the
    device's peak, ``roofline_fraction``; nothing for a row without counted FLOPs."""
    if "flops_per_round" not in row:
        return {}
    tflops = row["flops_per_round"] / row["median_round_seconds"] / 1e12
    return {"tflops": tflops, **({"roofline_fraction": tflops / peak_tflops} if peak_tflops else {})}


def train_setups(cfg: ThroughputConfig) -> list[TrainSetup]:
    """The training grid, V by V and width by width, exact and full first within each (V, width);
    ``afp`` once per rho."""
    return [TrainSetup(v, mode, softmax, hidden, rho, cfg.batch_size, cfg.bptt, cfg.batches, cfg.precision,
                       cfg.compile)
            for v in cfg.vocab_sizes for hidden in cfg.hiddens or (cfg.hidden,) for mode in cfg.modes
            for rho in (cfg.rhos or (cfg.rho,) if mode == "afp" else (cfg.rho,)) for softmax in cfg.softmaxes]


def score_setups(cfg: ThroughputConfig) -> list[ScoreSetup]:
    return [ScoreSetup(cfg.score_vocab_size, softmax, cfg.hidden, cfg.rho, cfg.contexts, cfg.targets_per_context)
            for softmax in cfg.softmaxes]


def benchmark(cfg: ThroughputConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run both measurements; the JSON object of the module docstring (without ``command``)."""
    from lm.device import resolve_device

    device = resolve_device(cfg.device)
    threads = cfg.threads or torch.get_num_threads()
    torch.set_num_threads(threads)

    def rows(setups: Sequence[Any], rate_key: str, describe: Callable[[Any], dict[str, Any]]) -> list[dict[str, Any]]:
        measured = measure(setups, cfg.rounds, device, threads, cfg.isolate, rate_key, log)
        return [{**describe(s), **m} for s, m in zip(setups, measured, strict=True)]

    train = rows(train_setups(cfg), "tokens_per_second", lambda s: {
        "vocab_size": s.vocab_size, "hidden": s.hidden, "mode": s.mode, "rho": s.rho if s.mode == "afp" else None,
        "softmax": s.softmax, "name": s.name, "tokens_per_round": s.units})
    for row in train:
        same = [r for r in train if (r["vocab_size"], r["hidden"]) == (row["vocab_size"], row["hidden"])]
        ref = next((r for r in same if r["mode"] == "exact" and r["softmax"] == "full"), None)
        row["speedup_over_exact_full"] = row["tokens_per_second"] / ref["tokens_per_second"] if ref else None
        cudnn = next((r for r in same if r["mode"] == "cudnn" and r["softmax"] == row["softmax"]), None)
        row["speedup_over_cudnn"] = row["tokens_per_second"] / cudnn["tokens_per_second"] if cudnn else None
        row.update(flop_rates(row, cfg.peak_tflops))
    result: dict[str, Any] = {
        "benchmark": "bench.train_throughput", "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "config": dataclasses.asdict(cfg), "cell": "gru", "zipf_exponent": ZIPF_EXPONENT, "train": train, "score": None}
    if cfg.score_vocab_size:
        scored = rows(score_setups(cfg), "contexts_per_second", lambda s: {
            "vocab_size": s.vocab_size, "softmax": s.softmax, "name": s.name, "contexts_per_round": s.units,
            "targets_per_round": s.units * s.targets_per_context})
        full = next((r for r in scored if r["softmax"] == "full"), None)
        for row in scored:
            row["speedup_over_full"] = row["contexts_per_second"] / full["contexts_per_second"] if full else None
        result["score"] = {"vocab_size": cfg.score_vocab_size, "rho": cfg.rho, "contexts": cfg.contexts,
                           "targets_per_context": cfg.targets_per_context, "rows": scored}
    result["environment"] = environment()
    return result


MEMORY_LABELS = {"peak_cuda_mib": "peak CUDA memory (MiB)", "peak_rss_mib": "peak RSS (MiB)"}


def _memory_key(result: dict[str, Any]) -> str | None:
    """The peak-memory field the rows carry: CUDA's when measured on a GPU, else RSS, else None."""
    return next((key for key in MEMORY_LABELS if result["train"] and key in result["train"][0]), None)


def plot(result: dict[str, Any], path: Path) -> None:
    """Tokens/s and peak memory per V (one bar per mode and softmax), and scoring contexts/s."""
    plt = pyplot()
    memory = _memory_key(result)
    panels = [("tokens_per_second", "training tokens/s")] + ([(memory, MEMORY_LABELS[memory])] if memory else [])
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(5.5 * (len(panels) + 1), 4.2))
    train = result["train"]
    vocab_sizes = sorted({r["vocab_size"] for r in train})
    kinds = list(dict.fromkeys((r["mode"], r["softmax"]) for r in train))
    width = 0.8 / len(kinds)
    for ax, (key, label) in zip(axes, panels, strict=False):
        for i, (mode, softmax) in enumerate(kinds):
            values = [next((r[key] for r in train if (r["vocab_size"], r["mode"], r["softmax"]) == (v, mode, softmax)),
                           0.0) for v in vocab_sizes]
            ax.bar([x + i * width for x in range(len(vocab_sizes))], values, width,
                   label=f"{_mode_name(mode, result['config']['rho'])}, {softmax}")
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(vocab_sizes))], [f"V={v:,}" for v in vocab_sizes])
        ax.set(yscale="log" if key == "tokens_per_second" else "linear", ylabel=label)
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"GRU {result['config']['hidden']}, {result['device_name']}, {result['config']['precision']}")
    if result["score"]:
        rows = result["score"]["rows"]
        axes[-1].bar_label(axes[-1].bar([r["softmax"] for r in rows], [r["contexts_per_second"] for r in rows],
                                        color="C2"), fmt="%.0f")
        axes[-1].set(ylabel="score_contexts contexts/s",
                     title=f"AFP-{result['score']['rho']} scoring, V={result['score']['vocab_size']:,}")
    save_figure(fig, path)


def parse_args(argv: Sequence[str] | None = None) -> tuple[ThroughputConfig, Path | None]:
    """The configuration (every :class:`ThroughputConfig` field an option of the same name) and ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(**dataclasses.asdict(ThroughputConfig()))
    parser.add_argument("--vocab-sizes", type=int, nargs="+")
    parser.add_argument("--modes", nargs="+", choices=MODES)
    parser.add_argument("--softmax", dest="softmaxes", nargs="+", choices=SOFTMAXES)
    for name in ("hidden", "rho", "batch_size", "rounds", "contexts", "targets_per_context"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int)
    parser.add_argument("--hiddens", type=int, nargs="+", help="the training grid's widths (default: --hidden)")
    parser.add_argument("--rhos", type=int, nargs="+", help="the training grid's AFP iterations (default: --rho)")
    parser.add_argument("--compile", action="store_true", help="train through torch.compile")
    parser.add_argument("--peak-tflops", type=float,
                        help="the device's peak at the precision (H200 dense bf16: 989): the roofline fraction")
    parser.add_argument("--bptt", type=int, help="tokens per row")
    parser.add_argument("--batches", type=int, help="batches per round (a fixed sample)")
    parser.add_argument("--precision", choices=("fp32", "bf16"),
                        help="training precision (bf16: autocast); scoring stays float32")
    parser.add_argument("--score-vocab-size", type=int, help="V of the scoring measurement (0: skip it)")
    parser.add_argument("--device")
    parser.add_argument("--threads", type=int, help="torch threads of every process (default: torch's)")
    parser.add_argument("--in-process", dest="isolate", action="store_false",
                        help="run every configuration in this process (no per-configuration memory)")
    parser.add_argument("--quick", action="store_true", help=f"tiny sizes, a check that it runs: {QUICK}")
    parser.add_argument("--out", type=Path, help="JSON path (default bench/results/train_throughput_<device>.json)")
    fields = vars(parser.parse_args(argv))
    out, quick = fields.pop("out"), fields.pop("quick")
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    try:
        return ThroughputConfig(**{**fields, **(QUICK if quick else {})}), out
    except ValueError as err:
        parser.error(str(err))


def main(argv: Sequence[str] | None = None) -> None:
    cfg, out = parse_args(argv)
    result = benchmark(cfg)
    result["command"] = command_line("bench.train_throughput", argv)
    out = out or RESULTS / f"train_throughput_{torch.device(result['device']).type}.json"
    write_json(out, result)
    plot(result, out.with_suffix(".png"))
    for row in result["train"]:
        ratio = row["speedup_over_exact_full"]
        print(f"{row['name']:>42}: {row['tokens_per_second']:10.0f} tokens/s"
              + (f"  x{ratio:.2f} of exact full" if ratio is not None else "")
              + (f"  x{row['speedup_over_cudnn']:.2f} of torch.nn.GRU" if row.get("speedup_over_cudnn") else "")
              + (f"  {row['tflops']:.3g} TFLOP/s" if "tflops" in row else "")
              + (f" ({100 * row['roofline_fraction']:.1f}% of peak)" if "roofline_fraction" in row else "")
              + (f"  peak {row[k]:.0f} MiB" if (k := _memory_key(result)) else ""))
    for row in (result["score"] or {}).get("rows", []):
        ratio = row["speedup_over_full"]
        print(f"{row['name']:>42}: {row['contexts_per_second']:10.0f} contexts/s"
              + (f"  x{ratio:.2f} of full" if ratio is not None else ""))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
