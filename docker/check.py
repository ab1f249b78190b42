"""``make docker-check``: build docker/Dockerfile.cpu with the engine at hand and exercise the image.

    .venv/bin/python docker/check.py [--no-cuda] [--keep]

The engine is docker when its daemon answers, else podman. With neither, running as root on a
Debian machine, podman is installed (``apt-get install podman runc debootstrap``) and configured
through a ``containers.conf`` of its own (``CONTAINERS_CONF``): runc (crun refuses cgroups in
hybrid mode), cgroupfs, and fixed ulimits (the default ones fail with "setrlimit: Operation not
permitted"). When no engine can be had, it prints "docker-check: skipped: <why>" and exits 0;
a failed build or check exits 1.

The base ``python:3.11-slim`` is pulled, or, when it cannot be, a stand-in is built once with
debootstrap (Debian bookworm's python3 is 3.11) and imported under that name; an existing image
is reused. pip inside the build gets this machine's pip configuration (merged into one pip.conf),
CA bundle and the local wheel directories and indexes that configuration names, mounted
read-only (podman ``build -v``), and the host network; a real user's build needs none of them.

Checks, each printed PASS or FAIL: /healthz and /readyz; /v1/rescore on examples/lattice.txt
equals the host's ``afp rescore``; /v1/perplexity equals the host's ``afp ppl``; the server runs
as uid 10001; the image's HEALTHCHECK passes; /models is mounted read-only; the runtime stage has
no lhotse, test extras or nvidia packages and the lazy importers still import; a stop (SIGTERM)
with a request in flight lets the request finish with 200. Then docker/Dockerfile.cuda is built
on a CPU stand-in for its PyTorch base (--no-cuda skips it) and run up to where it needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from afp.compare import Comparison, compare_answers

REPO = Path(__file__).resolve().parents[1]
WORK = Path(os.environ.get("AFP_CHECK_WORKDIR", "/var/tmp/afp-docker-check"))  # outside the repository
BASE = "python:3.11-slim"
IMAGE = "afp-rescore:cpu"
CUDA_IMAGE = "afp-rescore:cuda-check"
CUDA_STANDIN = "afp-check-pytorch-standin:latest"
UID = 10001
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CONTAINERS_CONF = """\
# written by docker/check.py for podman on this machine (CONTAINERS_CONF)
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""
#: pip settings whose values name files, directories or file:// indexes to mount in the build
PATH_KEYS = {"cert", "client-cert", "constraint", "requirement", "find-links", "index-url", "extra-index-url"}


class Skip(Exception):
    """No engine can be had here: not a failure of the image."""


class Failure(Exception):
    """The image could not be built or run."""


def say(message: str) -> None:
    print(f"docker-check: {message}", flush=True)


def run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float | None = None, check: bool = True,
        capture: bool = True, stdin: Any = subprocess.DEVNULL) -> subprocess.CompletedProcess:
    """Run a command without stdin (CI has none); its output captured unless ``capture`` is False."""
    try:
        done = subprocess.run(cmd, env=env, timeout=timeout, stdin=stdin, text=True,
                              stdout=subprocess.PIPE if capture else None,
                              stderr=subprocess.STDOUT if capture else None)
    except subprocess.TimeoutExpired:
        raise Failure(f"{' '.join(cmd[:4])} ... ran past {timeout:g} s") from None
    if check and done.returncode != 0:
        tail = (done.stdout or "")[-3000:]
        raise Failure(f"{' '.join(cmd[:6])} ... exited {done.returncode}\n{tail}")
    return done


def run_logged(cmd: list[str], *, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run a long command (a build) with its output shown as it comes, indented, and kept."""
    process = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace")
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    lines = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            print(f"    | {line}", end="", flush=True)
        code = process.wait()
    finally:
        timer.cancel()
    if code < 0:
        lines.append(f"{' '.join(cmd[:4])} ... killed after {timeout:g} s\n")
    return subprocess.CompletedProcess(cmd, code, "".join(lines))


class Engine:
    """docker or podman, with the environment (CONTAINERS_CONF) its commands run under."""

    def __init__(self, name: str, env: dict[str, str]):
        self.name, self.env = name, env

    def __call__(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess:
        return run([self.name, *args], env=self.env, **kwargs)

    def has_image(self, image: str) -> bool:
        return self("image", "inspect", image, check=False).returncode == 0

    def image_size(self, image: str) -> int:
        return int(self("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())


# ---------------------------------------------------------------------------------------- engine

def find_engine() -> Engine:
    if shutil.which("docker") and run(["docker", "info"], check=False, timeout=60).returncode == 0:
        return Engine("docker", dict(os.environ))
    if shutil.which("podman") is None:
        install_podman()
    env = dict(os.environ)
    if "CONTAINERS_CONF" not in env and os.geteuid() == 0 and shutil.which("runc"):
        WORK.mkdir(parents=True, exist_ok=True)
        conf = WORK / "containers.conf"
        conf.write_text(CONTAINERS_CONF)
        env["CONTAINERS_CONF"] = str(conf)
    return Engine("podman", env)


def apt_install(*packages: str) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    run(["apt-get", *lock, "update"], env=env, timeout=900)
    run(["apt-get", *lock, "install", "-y", *packages], env=env, timeout=1800)


def install_podman() -> None:
    why = "no docker daemon answers and podman is not installed"
    if os.geteuid() != 0:
        raise Skip(f"{why}, and installing it needs root")
    if shutil.which("apt-get") is None:
        raise Skip(f"{why}, and there is no apt-get to install it with")
    say("installing podman (apt-get install podman runc debootstrap)")
    started = time.monotonic()
    try:
        apt_install("podman", "runc", "debootstrap")
    except Failure as err:
        raise Skip(f"{why}, and installing it failed: {str(err)[-500:]}") from None
    if shutil.which("podman") is None:
        raise Skip(f"{why}, and apt-get did not install it")
    say(f"podman installed in {time.monotonic() - started:.0f} s")


# ------------------------------------------------------------------------------------ base image

def debian_mirror() -> str | None:
    """The Debian mirror apt uses here (deb822 or one-line sources), else None (debootstrap's own default)."""
    for path in [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]:
        if path.is_file():
            for line in path.read_text().splitlines():
                words = line.split()
                if line.startswith("URIs:") and len(words) > 1 and "security" not in words[1]:
                    return words[1]
                if words[:1] == ["deb"] and len(words) > 2 and "security" not in line:
                    return next(w for w in words[1:] if "://" in w)
    return None


def ensure_base(engine: Engine) -> None:
    if engine.has_image(BASE):
        say(f"base image {BASE}: present, reused")
        return
    say(f"base image {BASE}: trying to pull it")
    started = time.monotonic()
    try:
        pulled = run([engine.name, "pull", f"docker.io/library/{BASE}"], env=engine.env, check=False, timeout=120)
    except Failure as err:  # ran past its time
        pulled = subprocess.CompletedProcess([], 1, str(err))
    if pulled.returncode == 0 and engine.has_image(BASE):
        return
    last = pulled.stdout.strip().splitlines()[-1:] or [""]
    say(f"{BASE} cannot be pulled ({time.monotonic() - started:.0f} s: {last[0][-200:]}): "
        "building a stand-in (debootstrap bookworm, whose python3 is 3.11)")
    if shutil.which("debootstrap") is None:
        if os.geteuid() != 0:
            raise Failure(f"{BASE} cannot be pulled and debootstrap is missing (needs root to install)")
        apt_install("debootstrap")
    started = time.monotonic()
    rootfs = WORK / "bookworm-rootfs"
    for attempt in (1, 2):  # a download that breaks off is tried once more
        if rootfs.exists():  # a previous attempt's leftovers
            shutil.rmtree(rootfs)
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        try:
            mirror = debian_mirror()  # none configured: debootstrap's own default
            run(["debootstrap", "--variant=minbase", "--include=python3,python3-venv,python-is-python3,ca-certificates",
                 "bookworm", str(rootfs), *([mirror] if mirror else [])], timeout=2400)
            break
        except Failure as err:
            if attempt == 2:
                raise
            say(f"debootstrap failed, trying once more: {str(err)[-300:]}")
    for cache in ["var/cache/apt/archives", "var/lib/apt/lists"]:
        for item in (rootfs / cache).glob("*"):
            if item.is_file():
                item.unlink()
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    run([engine.name, "import", "--change", f"ENV {PATH_ENV}", "--change", "ENV LANG=C.UTF-8",
         "--change", 'CMD ["python3"]', "-", BASE], env=engine.env, stdin=tar.stdout, timeout=900)
    tar.stdout.close()
    if tar.wait() != 0:
        raise Failure("tar of the debootstrap directory failed")
    shutil.rmtree(rootfs)
    say(f"stand-in {BASE} built and imported in {time.monotonic() - started:.0f} s")


# ---------------------------------------------------------------------------------- pip settings

def pip_settings() -> dict[str, dict[str, str]]:
    """This machine's pip configuration, merged (the environment over the files), by section."""
    listed = run([sys.executable, "-m", "pip", "config", "list"], check=False).stdout or ""
    merged: dict[str, dict[str, str]] = {}
    from_env: dict[str, str] = {}
    for line in listed.splitlines():
        if "=" not in line or "." not in line.split("=", 1)[0]:
            continue
        name, value = line.split("=", 1)
        section, key = name.rsplit(".", 1)
        value = value.strip().strip("'\"")
        if section == ":env:":
            from_env[key] = value
        else:
            merged.setdefault(section, {})[key] = value
    merged.setdefault("global", {}).update(from_env)
    return merged


def build_mounts(settings: dict[str, dict[str, str]]) -> tuple[Path, list[Path]]:
    """A pip.conf of ``settings`` and the host paths it names (each mounted at the same place)."""
    paths: set[Path] = set()
    for values in settings.values():
        for key, value in values.items():
            if key not in PATH_KEYS:
                continue
            for token in value.split():
                if token.startswith("file://"):
                    path = Path(urllib.parse.unquote(urllib.parse.urlparse(token).path))
                    # an index's pages link to their files relatively (../../files/...): mount its parent
                    if key.endswith("index-url") and path.name == "simple" and path.parent != Path("/"):
                        path = path.parent
                elif token.startswith("/"):
                    path = Path(token)
                else:
                    continue
                if path.exists():
                    paths.add(path.resolve())
    WORK.mkdir(parents=True, exist_ok=True)
    conf = WORK / "pip.conf"
    conf.write_text("".join(f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()) + "\n"
                            for section, values in settings.items() if values))
    return conf, sorted(paths)


def build_flags(engine: Engine) -> list[str]:
    """This machine's extra build flags: the host network, and with podman its pip settings mounted."""
    settings = pip_settings()
    flags = ["--network", "host"]
    names_sources = any(k in v for v in settings.values() for k in ("index-url", "extra-index-url", "find-links"))
    torch_index = os.environ.get("AFP_CHECK_TORCH_INDEX_URL")
    if torch_index is None and names_sources:
        # this machine's configured index (with its local wheels) serves plain torch==2.13.0 as the CPU build;
        # with none configured, pip's own default index
        torch_index = settings.get("global", {}).get("index-url")
    if torch_index:
        flags += ["--build-arg", f"TORCH_INDEX_URL={torch_index}"]
    if engine.name == "podman":
        flags += ["--format", "docker"]  # OCI format drops the HEALTHCHECK
        if any(settings.values()):
            conf, paths = build_mounts(settings)
            flags += ["-v", f"{conf}:/etc/pip.conf:ro"]
            for path in paths:
                flags += ["-v", f"{path}:{path}:ro"]
            say(f"pip in the build: this machine's pip.conf and {', '.join(map(str, paths)) or 'no paths'}")
    elif any(settings.values()):
        say("note: docker build cannot mount this machine's pip configuration; pip in the build uses its defaults")
    return flags


def build(engine: Engine, dockerfile: str, tag: str, flags: list[str], timeout: float = 3600) -> float:
    started = time.monotonic()
    say(f"building {tag} from {dockerfile} with {engine.name}")
    done = run_logged([engine.name, "build", *flags, "-f", dockerfile, "-t", tag, str(REPO)], env=engine.env,
                      timeout=timeout)
    if done.returncode != 0:
        raise Failure(f"building {dockerfile} failed:\n{done.stdout[-6000:]}")
    seconds = time.monotonic() - started
    say(f"built {tag} in {seconds:.0f} s ({engine.image_size(tag) / 1e9:.2f} GB)")
    return seconds


# -------------------------------------------------------------------------------------- checking

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, body: bytes | None = None, content_type: str = "application/json",
         timeout: float = 120) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type} if body else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def host_json(*args: str) -> list[Any]:
    """The host's ``afp`` answer (JSON lines)."""
    afp = Path(sys.executable).parent / "afp"
    done = subprocess.run([str(afp) if afp.exists() else "afp", *args], cwd=REPO, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600)
    if done.returncode != 0:
        raise Failure(f"host afp {' '.join(args)} failed: {done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


VOLATILE = {"seconds", "timing"}


def same(expected: Any, got: Any) -> Comparison:
    """The container's answer against the host's as the parity test compares doors
    (:func:`afp.compare.compare_answers`): words, keys, counts and n-best order equal, scores
    within :data:`afp.compare.SCORE_TOLERANCE`; timings left out. The two are different processes
    (a server with its threads and batching, a one-thread CLI), so float32 scores differ in the
    seventh digit between machines; the largest difference is printed either way."""
    return compare_answers(expected, got, ignore=VOLATILE)


class Report:
    def __init__(self) -> None:
        self.results: list[tuple[str, bool, str]] = []

    def check(self, name: str, passed: bool, detail: str = "") -> bool:
        self.results.append((name, passed, detail))
        print(f"{'PASS' if passed else 'FAIL'}  {name}{': ' + detail if detail else ''}", flush=True)
        return passed

    def attempt(self, name: str, test) -> None:  # noqa: ANN001 - a callable returning (passed, detail)
        try:
            passed, detail = test()
        except Exception as err:  # noqa: BLE001 - a check that raises has failed; the others still run
            passed, detail = False, f"{type(err).__name__}: {str(err)[-1500:]}"
        self.check(name, passed, detail)

    @property
    def failed(self) -> list[str]:
        return [name for name, passed, _ in self.results if not passed]


def wait_for(url: str, seconds: float, container_alive, started: float) -> float:  # noqa: ANN001
    """Seconds from ``started`` until ``url`` answers 200."""
    while time.monotonic() - started < seconds:
        try:
            if http(url, timeout=3)[0] == 200:
                return time.monotonic() - started
        except OSError:
            pass
        if not container_alive():
            raise Failure("the container exited")
        time.sleep(0.25)
    raise Failure(f"{url} did not answer 200 within {seconds:g} s")


def exercise(engine: Engine, report: Report) -> None:
    port, name = free_port(), f"afp-docker-check-{os.getpid()}"
    url = f"http://127.0.0.1:{port}"
    lattice = (REPO / "examples" / "lattice.txt").read_bytes()
    sentences = [s for s in (REPO / "examples" / "conversation.txt").read_text().splitlines() if s.strip()]
    # the host's answers (same model directory, same defaults)
    expected_rescore = host_json("rescore", "--json", "--nbest", "2", "--model", "models/conversational",
                                 "examples/lattice.txt")
    expected_ppl = host_json("ppl", "--json", "--model", "models/conversational", "--text", "examples/conversation.txt")[0]

    started = time.monotonic()
    engine("run", "--detach", "--name", name, "--network", "host", "-e", "AFP_HOST=127.0.0.1", "-e", f"AFP_PORT={port}",
           "-v", f"{REPO / 'models'}:/models:ro", IMAGE, timeout=120)

    def alive() -> bool:
        state = engine("inspect", "--format", "{{.State.Running}}", name, check=False).stdout.strip()
        return state == "true"

    try:
        healthz = wait_for(f"{url}/healthz", 180, alive, started)
        readyz = wait_for(f"{url}/readyz", 180, alive, started)
        report.check("/healthz and /readyz answer 200", True,
                     f"healthz after {healthz:.1f} s, readyz after {readyz:.1f} s from `{engine.name} run`")

        def rescore() -> tuple[bool, str]:
            status, body = http(f"{url}/v1/rescore?nbest=2", lattice, "text/plain")
            if status != 200:
                return False, f"{status} {body[:300]!r}"
            results = json.loads(body)["results"]
            missing = [k for k in ("key", "best", "nbest", "first_pass") if any(k not in r for r in results)]
            found = same(expected_rescore, results)
            words = [" ".join(r["best"]["words"]) for r in results]
            detail = f"fields missing: {missing}; " if missing else f"best: {words}; "
            return found.same and not missing, detail + found.describe()
        report.attempt("/v1/rescore on examples/lattice.txt equals host `afp rescore`", rescore)

        def perplexity() -> tuple[bool, str]:
            status, body = http(f"{url}/v1/perplexity", json.dumps({"sentences": sentences}).encode())
            if status != 200:
                return False, f"{status} {body[:300]!r}"
            answer = json.loads(body)
            logprob = sum(s["logprob"] for s in answer["per_sentence"])
            found = same({k: expected_ppl[k] for k in ("ppl", "tokens", "oov", "logprob")},
                         {"ppl": answer["ppl"], "tokens": answer["tokens"], "oov": answer["oov"], "logprob": logprob})
            return found.same, f"ppl {answer['ppl']:.4f} over {answer['tokens']} tokens; {found.describe()}"
        report.attempt("/v1/perplexity equals host `afp ppl`", perplexity)

        def non_root() -> tuple[bool, str]:
            status = engine("exec", name, "cat", "/proc/1/status").stdout
            uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
            exec_uid = engine("exec", name, "id", "-u").stdout.strip()
            ok = set(uids) == {str(UID)} and exec_uid == str(UID)
            return ok, f"server process (pid 1) uids {uids}, exec uid {exec_uid}"
        report.attempt(f"the server runs as non-root uid {UID}", non_root)

        def healthcheck() -> tuple[bool, str]:
            if engine.name == "podman":
                done = engine("healthcheck", "run", name, check=False, timeout=60)
                return done.returncode == 0, f"podman healthcheck run: exit {done.returncode} {done.stdout.strip()}"
            deadline = time.monotonic() + 120  # docker runs it every 15 s (--interval)
            while time.monotonic() < deadline:
                health = engine("inspect", "--format", "{{.State.Health.Status}}", name).stdout.strip()
                if health in ("healthy", "unhealthy"):
                    return health == "healthy", f"docker inspect: {health}"
                time.sleep(2)
            return False, "docker never ran the HEALTHCHECK"
        report.attempt("the image's HEALTHCHECK passes", healthcheck)

        def read_only() -> tuple[bool, str]:
            done = engine("exec", "--user", "0", name, "touch", "/models/conversational/.write-probe", check=False)
            text = done.stdout.strip()
            return done.returncode != 0 and "read-only" in text.lower(), f"write as root: exit {done.returncode} {text}"
        report.attempt("/models is mounted read-only (a write inside fails)", read_only)

        def slim() -> tuple[bool, str]:
            probe = ("import importlib.metadata as m, importlib.util as u, json; "
                     "import service.app, afp, afp.cuts, afp.wer, lm.corpus, lattices.mbr; "
                     "names = sorted(d.metadata['Name'].lower() for d in m.distributions()); "
                     "print(json.dumps({'present': [x for x in ('lhotse', 'matplotlib', 'pytest', 'hypothesis', "
                     "'schemathesis', 'pocketsphinx', 'httpx') if u.find_spec(x)], "
                     "'nvidia': [n for n in names if n.startswith('nvidia')], "
                     "'torch': m.version('torch'), 'count': len(names)}))")
            done = engine("exec", name, "python", "-c", probe, check=False)
            if done.returncode != 0:
                return False, done.stdout[-1500:]
            found = json.loads(done.stdout.strip().splitlines()[-1])
            ok = not found["present"] and not found["nvidia"]
            return ok, (f"{found['count']} distributions, torch {found['torch']}; no lhotse/test extras/nvidia; "
                        "the lazy importers (afp.cuts, afp.wer, lm.corpus) import" if ok else json.dumps(found))
        report.attempt("the runtime stage is slim (no lhotse, test extras or nvidia packages)", slim)

        def stop_in_flight() -> tuple[bool, str]:
            # a request of several seconds (about 10 s on 2 busy cores): many long sentences
            words = " ".join(sentences).split()
            long = [" ".join(words[i % len(words):] + words[:i % len(words)])[:2400] for i in range(8000)]
            answer: dict[str, Any] = {}

            def post() -> None:
                try:
                    answer["status"], body = http(f"{url}/v1/perplexity", json.dumps({"sentences": long}).encode(),
                                                  timeout=300)
                    answer["sentences"] = len(json.loads(body).get("per_sentence", []))
                except Exception as err:  # noqa: BLE001
                    answer["error"] = repr(err)
                answer["done"] = time.monotonic()
            def in_progress() -> float:
                text = http(f"{url}/metrics", timeout=10)[1].decode()
                return next(float(line.split()[-1]) for line in text.splitlines()
                            if line.startswith("afp_requests_in_progress"))
            baseline = in_progress()  # counts the /metrics request itself, or not
            thread = threading.Thread(target=post)
            thread.start()
            deadline = time.monotonic() + 60
            while in_progress() <= baseline and "done" not in answer and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)  # the body is sent and the work has begun
            in_flight = "done" not in answer
            stop_started = time.monotonic()
            engine("stop", "--time", "90", name, timeout=180)  # SIGTERM, then SIGKILL after 90 s
            stopped = time.monotonic() - stop_started
            thread.join(300)
            code = engine("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
            finished_after_stop = answer.get("done", 0) > stop_started
            ok = in_flight and finished_after_stop and answer.get("status") == 200 and answer.get("sentences") == len(long)
            return ok, (f"request in flight at SIGTERM: {in_flight}; it answered {answer.get('status', answer.get('error'))} "
                        f"with {answer.get('sentences')} of {len(long)} sentences "
                        f"{answer.get('done', 0) - stop_started:+.1f} s after the stop began; "
                        f"the container stopped in {stopped:.1f} s, exit code {code}")
        report.attempt("a stop (SIGTERM) with a request in flight lets it finish with 200", stop_in_flight)
    except Failure as err:
        report.check("the container serves", False, str(err))
        print(engine("logs", name, check=False).stdout[-3000:], flush=True)
    finally:
        engine("rm", "--force", name, check=False, timeout=120)
        say(f"the container's checks took {time.monotonic() - started:.0f} s")


def check_cuda(engine: Engine, flags: list[str], report: Report) -> None:
    """Dockerfile.cuda on a CPU stand-in for its PyTorch base: everything up to where a GPU is needed."""
    standin = WORK / "pytorch-standin"
    standin.mkdir(parents=True, exist_ok=True)
    (standin / "Dockerfile").write_text(
        f"# a CPU stand-in for pytorch/pytorch (Python 3.11 and torch in /opt/conda), written by docker/check.py\n"
        f"FROM {BASE}\nARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu\n"
        f"ENV PIP_NO_CACHE_DIR=1 PATH=/opt/conda/bin:$PATH\n"
        f'RUN python -m venv /opt/conda && pip install --index-url "$TORCH_INDEX_URL" torch==2.13.0\n')
    if not engine.has_image(CUDA_STANDIN):
        say(f"building {CUDA_STANDIN} (a CPU stand-in for the PyTorch base)")
        made = run_logged([engine.name, "build", *flags, "-t", CUDA_STANDIN, str(standin)], env=engine.env, timeout=1800)
        if made.returncode != 0:
            raise Failure(f"building the stand-in {CUDA_STANDIN} failed")
    base_torch = engine("run", "--rm", "--entrypoint", "python", CUDA_STANDIN, "-c",
                        "import torch; print(torch.__version__)").stdout.strip().splitlines()[-1]
    started = time.monotonic()
    say(f"building {CUDA_IMAGE} from docker/Dockerfile.cuda on {CUDA_STANDIN}")
    done = run_logged([engine.name, "build", *flags, "--build-arg", f"BASE={CUDA_STANDIN}", "-f",
                       "docker/Dockerfile.cuda", "-t", CUDA_IMAGE, str(REPO)], env=engine.env, timeout=1800)
    if not report.check("docker/Dockerfile.cuda builds (on a CPU stand-in base)", done.returncode == 0,
                        f"{time.monotonic() - started:.0f} s" if done.returncode == 0 else done.stdout[-3000:]):
        return
    fetched = [line.strip() for line in done.stdout.splitlines()
               if ("Collecting torch" in line or "torch-" in line and ".whl" in line)]
    report.check("the CUDA build fetches no second torch (the base's is kept)", not fetched,
                 "; ".join(fetched[:3]) or f"no torch in the build's pip output")
    probe = engine("run", "--rm", "--entrypoint", "python", CUDA_IMAGE, "-c",
                   "import torch, service.app, afp; print(torch.__version__)", check=False)
    image_torch = probe.stdout.strip().splitlines()[-1] if probe.stdout.strip() else ""
    report.check("the CUDA image imports the server with the base's torch", probe.returncode == 0 and image_torch == base_torch,
                 f"torch {image_torch} (base {base_torch})" if probe.returncode == 0 else probe.stdout[-1500:])
    # `afp serve` starts, reads its settings and stops at loading the model onto the GPU it was built for
    serve = engine("run", "--rm", "--network", "none", CUDA_IMAGE, check=False, timeout=300)
    gpu_lines = [line.strip() for line in serve.stdout.splitlines()
                 if "cuda" in line.lower() and "not available" in line.lower()]
    report.check("the CUDA image runs `afp serve` up to where it needs a GPU", serve.returncode != 0 and bool(gpu_lines),
                 f"exit {serve.returncode}: {gpu_lines[-1] if gpu_lines else serve.stdout[-1500:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-cuda", action="store_true", help="skip building docker/Dockerfile.cuda on a stand-in")
    args = parser.parse_args(argv)
    started = time.monotonic()
    report = Report()
    try:
        engine = find_engine()
        say(f"engine: {engine.name} ({engine('--version', check=False).stdout.strip()})"
            + (f", CONTAINERS_CONF={engine.env['CONTAINERS_CONF']}" if "CONTAINERS_CONF" in engine.env else ""))
        ensure_base(engine)
        flags = build_flags(engine)
        build(engine, "docker/Dockerfile.cpu", IMAGE, flags)
        exercise(engine, report)
        if not args.no_cuda:
            try:
                check_cuda(engine, flags, report)
            except Failure as err:
                report.check("docker/Dockerfile.cuda on a CPU stand-in", False, str(err))
    except Skip as why:
        say(f"skipped: {why}")
        return 0
    except Failure as err:
        say(f"FAILED: {err}")
        say(f"total {time.monotonic() - started:.0f} s")
        return 1
    say(f"total {time.monotonic() - started:.0f} s; "
        + (f"{len(report.failed)} of {len(report.results)} checks FAILED: {', '.join(report.failed)}" if report.failed
           else f"all {len(report.results)} checks passed"))
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
