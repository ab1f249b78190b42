"""Server settings: environment variables with the ``AFP_`` prefix (pydantic-settings).

Every limit has a safe default; ``afp serve`` flags override the environment.

  AFP_MODEL_DIR            model directory (default: the bundled default model)
  AFP_MODEL_NAME           the model's name in the server's model information (default: the directory's name)
  AFP_DEVICE               auto | cpu | cuda | cuda:N
  AFP_SCORE_PRECISION      output layer of scoring: fp32, bf16 (refined to within 1e-3 nats of
                           fp32), or auto (default: bf16 on CUDA, fp32 on CPU); lm/output.py
  AFP_HOST, AFP_PORT       where ``afp serve`` listens
  AFP_MAX_BODY_BYTES       largest request body (413 above)
  AFP_BODY_DRAIN_S         after refusing a body before reading all of it (413, 415), read and drop
                           the rest for at most this many seconds, so that a client still writing
                           it gets the answer, then close (default 30; nginx's lingering_time)
  AFP_BODY_DRAIN_IDLE_S    stop draining sooner after this many seconds without data (default 5;
                           nginx's lingering_timeout)
  AFP_MAX_JSON_DEPTH       deepest nesting of [ and { in a JSON body (422 above)
  AFP_MAX_LATTICE_ARCS     largest input lattice (422 above)
  AFP_MAX_LATTICES         most lattices in one request
  AFP_MAX_EXPANDED_ARCS    expansion budget per lattice (422 above, unless the request allows pruning)
  AFP_TARGET_EXPANDED_ARCS what a dense lattice's expansion is made small to, for speed (a
                           request's target_arcs overrides it; RescoreOptions in lattices/rescore.py);
                           0: no target, dense lattices expanded whole up to AFP_MAX_EXPANDED_ARCS
  AFP_MAX_NBEST            largest n-best a request may ask for
  AFP_MAX_SENTENCES        most sentences in one perplexity request
  AFP_MAX_SENTENCE_WORDS   most words in one sentence of a perplexity request (422 above)
  AFP_REQUEST_TIMEOUT_S    a request taking longer gets 503
  AFP_BATCHING             merge concurrent requests' scoring work: true, false, or unset for auto
                           (on for CUDA, off on CPU, where it measured slower: bench/results/load_cpu.json)
  AFP_BATCH_MAX_WAIT_MS    how long the batcher waits for more work
  AFP_BATCH_MAX_PAIRS      most (context, word) pairs in one merged batch
  AFP_WORKERS              threads per server process doing request work (parsing, expansion,
                           search) off the event loop
  AFP_PROCESSES            worker processes doing request work, each with the model loaded once,
                           each request to a free one (service/pool.py): a number, or auto
                           (default): the cores the server may use on a CPU (its affinity and
                           cgroup quota), 1 on a GPU, where 1 does the work in the app's threads
  AFP_AUTH_TOKEN           when set, every /v1 request needs "Authorization: Bearer <token>"
  AFP_CORS_ORIGINS         JSON list of allowed origins (default: none, CORS off)
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from afp.batching import DEFAULT_BATCH_PAIRS
from afp.defaults import default_model_dir
from lm.device import DEFAULT_DEVICE
from lattices.rescore import DEFAULT_MAX_EXPANDED_ARCS, DEFAULT_TARGET_EXPANDED_ARCS, NO_TARGET


class Settings(BaseSettings):
    """Server configuration (frozen)."""

    model_config = SettingsConfigDict(env_prefix="AFP_", frozen=True, extra="ignore")

    model_dir: Path = Field(default_factory=default_model_dir)
    model_name: str | None = None
    old_lm: Path | None = None  # the n-gram that built the decoding graph, an ARPA file or n-gram model directory (afp rescore --old-lm)
    weights: Path | None = None  # a weights file of afp tune --save: the weights of requests that give none
    #: acausal window models as named features, NAME=DIR,NAME=DIR (afp rescore --feature); a request
    #: names which to use (its "features"; default all), never a path
    features: str | None = None
    device: str = DEFAULT_DEVICE
    score_precision: Literal["auto", "fp32", "bf16"] = "auto"
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)

    max_body_bytes: int = Field(default=20 * 1024 * 1024, gt=0)
    body_drain_s: float = Field(default=30.0, ge=0)
    body_drain_idle_s: float = Field(default=5.0, gt=0)
    max_json_depth: int = Field(default=64, gt=0)
    max_lattice_arcs: int = Field(default=500_000, gt=0)
    max_lattices: int = Field(default=1000, gt=0)
    max_expanded_arcs: int = Field(default=DEFAULT_MAX_EXPANDED_ARCS, gt=0)
    target_expanded_arcs: int = Field(default=DEFAULT_TARGET_EXPANDED_ARCS, ge=NO_TARGET)  # NO_TARGET: none
    max_nbest: int = Field(default=100, gt=0)
    max_sentences: int = Field(default=10_000, gt=0)
    max_sentence_words: int = Field(default=1000, gt=0)
    request_timeout_s: float = Field(default=60.0, gt=0)

    batching: bool | None = None
    batch_max_wait_ms: float = Field(default=2.0, ge=0)
    batch_max_pairs: int = Field(default=DEFAULT_BATCH_PAIRS, gt=0)
    workers: int = Field(default=4, gt=0)
    processes: int | Literal["auto"] = "auto"

    auth_token: str | None = None
    cors_origins: list[str] = Field(default_factory=list)

    #: the limits a request meets, published in the OpenAPI schema (``info["x-afp-limits"]``)
    LIMITS: ClassVar[tuple[str, ...]] = ("max_body_bytes", "max_json_depth", "max_lattices", "max_lattice_arcs",
                                         "max_expanded_arcs", "max_nbest", "max_sentences", "max_sentence_words",
                                         "request_timeout_s")

    def limits(self) -> dict[str, float]:
        """Each of :data:`LIMITS` with this server's value."""
        return {name: getattr(self, name) for name in self.LIMITS}

    @field_validator("processes", mode="before")
    @classmethod
    def _processes(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        from afp.workers import parse_workers

        return parse_workers(value if isinstance(value, (int, str)) else str(value), "processes")

    def process_count(self, device_type: str) -> int:
        """Server processes to run: ``processes``, where ``auto`` is the cores this process may
        use on a CPU (:func:`afp.workers.available_cores`) and 1 on a GPU (one process feeds it,
        its scoring batched)."""
        if self.processes != "auto":
            return int(self.processes)
        from afp.workers import available_cores

        return available_cores() if device_type == "cpu" else 1

    def batching_on(self, device_type: str) -> bool:
        """Whether to merge concurrent scoring work on a device of this type ("cpu", "cuda")."""
        return self.batching if self.batching is not None else device_type == "cuda"


@lru_cache
def get_settings() -> Settings:
    """The settings from the environment, read once."""
    return Settings()
