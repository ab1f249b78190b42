"""The Docker deployment, checked without a Docker engine: lint, the image's entry command and
health check run outside Docker with only the packages the image installs, the build context, the
compose file's references, the Kaldi client script, and the pieces of docker/check.py (``make
docker-check`` builds and exercises the image with an engine). What a Dockerfile merely says is
not restated here: a check runs what it says, or compares it with another file it must agree with."""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import tomllib

import httpx
import pytest
import yaml

from tests.service.test_server_process import free_port

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
DOCKERFILES = [DOCKER / "Dockerfile.cpu", DOCKER / "Dockerfile.cuda"]  # the server's images
DECODER = DOCKER / "Dockerfile.decoder"
sys.path.insert(0, str(DOCKER))
import check as docker_check  # noqa: E402  (docker/check.py)
import runtime_requirements  # noqa: E402  (docker/runtime_requirements.py)


def final_stage(path: Path) -> list[str]:
    """The instructions of the last stage, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    last_from = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    return lines[last_from:]


def instruction(stage: list[str], name: str) -> str:
    matches = [line[len(name) + 1:] for line in stage if line.startswith(name + " ")]
    assert matches, f"{name} missing"
    return matches[-1]


def image_env(stage: list[str]) -> dict[str, str]:
    env = {}
    for line in stage:
        if line.startswith("ENV "):
            env.update(dict(pair.split("=", 1) for pair in line[4:].split()))
    return env


def test_dockerfiles_pass_hadolint():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    done = subprocess.run([hadolint, *map(str, DOCKERFILES), str(DECODER)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_run_as_a_user_that_is_not_root(dockerfile):
    """The last USER of the final stage (what the server runs as) names a user, not root; hadolint
    (DL3002) says nothing when a Dockerfile has no USER at all."""
    user = instruction(final_stage(dockerfile), "USER")
    assert user.split(":")[0] not in ("root", "0"), user


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_hold_every_package_the_project_installs(dockerfile):
    """Every top-level package of pyproject.toml's list is copied: a package left out installs an
    image whose server cannot start."""
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = [name.rstrip("*") for name in include]
    assert {"lm", "lattices", "afp", "service"} <= set(packages)
    text = dockerfile.read_text()
    for package in packages:
        assert f"COPY {package} {package}" in text, package


def dependency_layer(dockerfile: Path) -> list[str]:
    """The requirements a Dockerfile's dependency layer installs: its own ``runtime_requirements.py``
    command (read from its RUN line), run here on pyproject.toml as the image runs it (both are
    copied to one folder there). A ``--without`` name that is not a dependency fails the command."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    found = re.search(r"\bpython (runtime_requirements\.py [^>&|]*?)\s*> requirements\.txt", text)
    assert found, f"{dockerfile.name}: no dependency layer made by runtime_requirements.py"
    script, *args = shlex.split(found.group(1))
    done = subprocess.run([sys.executable, str(DOCKER / script), *args], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def left_out_modules(requirements: list[str]) -> set[str]:
    """The top-level modules importable here that an image installing ``requirements`` (and its own
    torch, pip and setuptools, and the project with --no-deps) lacks: those of every installed
    distribution outside what installing them brings, their dependencies followed recursively."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    kept, todo = {"afp-rescore"}, [Requirement(r) for r in [*requirements, "torch", "pip", "setuptools"]]
    while todo:
        wanted = todo.pop()
        name = canonicalize_name(wanted.name)
        if name in kept:
            continue
        kept.add(name)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            dependency = Requirement(text)
            if dependency.marker is None or any(dependency.marker.evaluate({"extra": extra})
                                                for extra in ("", *wanted.extras)):
                todo.append(dependency)
    ours = {"lm", "lattices", "afp", "service"}
    return {module for module, dists in metadata.packages_distributions().items()
            if module not in ours and module not in sys.stdlib_module_names
            and not any(canonicalize_name(d) in kept for d in dists)}


#: put first on PYTHONPATH (as sitecustomize.py), it makes the modules of LEFT_OUT unimportable, as in the image
_IMAGE_SITE = """import sys

LEFT_OUT = frozenset({left_out!r})


class _NotInTheImage:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in LEFT_OUT:
            raise ModuleNotFoundError(f"No module named {{name!r}} (the image does not install it)", name=name)
        return None


sys.meta_path.insert(0, _NotInTheImage())
"""


def image_python_path(dockerfile: Path, folder: Path) -> str:
    """A PYTHONPATH under which a process here imports only what ``dockerfile``'s image holds."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_IMAGE_SITE.format(left_out=sorted(left_out_modules(
        dependency_layer(dockerfile)))))
    return f"{folder}{os.pathsep}{REPO}"


def test_both_images_install_one_serving_set_without_a_second_torch(tmp_path):
    """Both images install the same dependency layer (the entry command below is run with the CPU
    image's), torch not among it (each image has its own: a second would replace it), and where
    that layer is imitated a module outside it cannot be imported while the server's own can."""
    cpu, cuda = (dependency_layer(dockerfile) for dockerfile in DOCKERFILES)
    assert cpu == cuda
    assert cpu and not [r for r in cpu if runtime_requirements.name_of(r) == "torch"], cpu
    env = {**os.environ, "PYTHONPATH": image_python_path(DOCKERFILES[0], tmp_path / "site")}
    left_out = left_out_modules(cpu)
    assert left_out and not left_out & {"fastapi", "uvicorn", "pydantic", "numpy", "torch"}, left_out
    outside = min(left_out)
    done = subprocess.run([sys.executable, "-c", f"import {outside}"], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "the image does not install it" in done.stderr, (outside, done.stderr)
    done = subprocess.run([sys.executable, "-c", "import fastapi, uvicorn, pydantic_settings, numpy"], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_runtime_requirements_names_and_unknown_names(tmp_path, capsys):
    assert runtime_requirements.name_of("Pydantic_Settings>=2.1") == "pydantic-settings"
    assert runtime_requirements.name_of("torch >=2.4; python_version >= '3.10'") == "torch"
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["torch>=2.4", "numpy>=1.24", "lhotse>=1.20"]\n')
    assert runtime_requirements.main([str(pyproject), "--without", "torch", "lhotse"]) == 0
    assert capsys.readouterr().out == "numpy>=1.24\n"
    with pytest.raises(SystemExit, match="no dependency named kaldi"):
        runtime_requirements.runtime_requirements(pyproject, ["kaldi"])


def test_the_cpu_images_torch_is_the_one_make_install_pins():
    """The torch the CPU image installs (its pip install line's pin) is the one ``make install``
    pins: the image serves with the torch the tests ran on."""
    text = re.sub(r"\\\n\s*", " ", (DOCKER / "Dockerfile.cpu").read_text())
    pins = set(re.findall(r"^RUN .*?pip install [^&]*?\b(torch==\S+)", text, re.M))
    makefile_torch = re.search(r"^TORCH\s*:=\s*(\S+)", (REPO / "Makefile").read_text(), re.M).group(1)
    assert pins == {makefile_torch}, (pins, makefile_torch)


def test_the_build_arguments_docker_check_passes_are_ones_the_dockerfiles_take():
    """``make docker-check`` (docker/check.py) overrides build arguments (a local torch index, a
    stand-in CUDA base): each is declared by an image's ARG and used there, or the override would
    be ignored and the build would reach the network; and the base it pulls or stands in for is the
    one the CPU image is built FROM."""
    passed = set(re.findall(r'"--build-arg", f"([A-Za-z_]+)=', (DOCKER / "check.py").read_text()))
    assert passed
    for name in passed:
        taking = [d.name for d in DOCKERFILES if re.search(rf"^ARG {name}(=|\s|$)", d.read_text(), re.M)
                  and re.search(rf"\$\{{?{name}\b", d.read_text())]
        assert taking, f"docker/check.py passes --build-arg {name}, which no image declares and uses"
    bases = [line.split()[1] for line in (DOCKER / "Dockerfile.cpu").read_text().splitlines() if line.startswith("FROM ")]
    assert set(bases) == {docker_check.BASE}, bases


def test_build_context_holds_what_the_dockerfiles_copy():
    """.dockerignore lets through only what some COPY names (not .venv, .git or benchmark runs)."""
    ignore = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert ignore[0] == "*"
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    sources = set()
    for dockerfile in [*DOCKERFILES, DECODER]:
        for line in re.sub(r"\\\n\s*", " ", dockerfile.read_text()).splitlines():
            if line.startswith("COPY ") and "--from" not in line:
                sources.update(line.split()[1:-1])
    assert sources <= allowed, sources - allowed
    assert all((REPO / path).exists() for path in allowed)
    assert not {".venv", ".git", "bench", "tests"} & allowed


def test_entry_command_and_healthcheck_work_outside_docker(tmp_path):
    """The image's ENTRYPOINT and CMD, with its ENV, run here with only the packages its dependency
    layer installs importable: its HEALTHCHECK command passes and the server answers a rescoring
    request (Viterbi and MBR, which imports kaldialign) with the example lattices' words."""
    stage = final_stage(DOCKER / "Dockerfile.cpu")
    command = json.loads(instruction(stage, "ENTRYPOINT")) + json.loads(instruction(stage, "CMD"))
    healthcheck = json.loads(instruction(stage, "HEALTHCHECK").split("CMD", 1)[1])
    env = {**os.environ, **image_env(stage), "PYTHONPATH": image_python_path(DOCKER / "Dockerfile.cpu", tmp_path)}
    # the image copies models/ to /models; outside Docker the same directory is in the repository
    env["AFP_MODEL_DIR"] = env["AFP_MODEL_DIR"].replace("/models", str(REPO / "models"), 1)
    env.update(AFP_HOST="127.0.0.1", AFP_PORT=str(free_port()))
    executable = Path(sys.executable).parent / command[0]
    command[0] = str(executable) if executable.exists() else shutil.which(command[0])
    server = subprocess.Popen(command, env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, server.stdout.read()
            check = subprocess.run([sys.executable if healthcheck[0] == "python" else healthcheck[0], *healthcheck[1:]],
                                   env=env, capture_output=True)
            if check.returncode == 0:
                break
            assert time.monotonic() < deadline, "the HEALTHCHECK command never passed"
            time.sleep(0.3)
        url = f"http://127.0.0.1:{env['AFP_PORT']}"
        models = httpx.get(f"{url}/v1/models").json()["models"]
        assert models[0]["name"] == "conversational"
        with gzip.open(REPO / "examples" / "kaldi" / "lat.1.gz", "rt") as f:
            body = {"format": "kaldi", "lattice": f.read(), "words": (REPO / "examples" / "kaldi" / "words.txt").read_text()}
        for decode in ("viterbi", "mbr"):
            r = httpx.post(f"{url}/v1/rescore", json={**body, "decode": decode}, timeout=60)
            assert r.status_code == 200, (decode, r.text, server.poll())
            results = r.json()["results"]
            assert [x["key"] for x in results] == ["utt-example-1", "utt-example-2"], decode
            assert results[0]["best"]["words"] == ["YEAH", "I", "THINK", "SO"], decode
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)


def test_compose_file_references_exist():
    compose = yaml.safe_load((DOCKER / "compose.yml").read_text())
    services = compose["services"]
    assert {"afp", "afp-gpu", "decoder", "kaldi"} <= set(services)
    for name in ("afp", "afp-gpu", "decoder"):
        assert (DOCKER / ".." / services[name]["build"]["dockerfile"]).resolve().is_file()
    # kaldiasr/kaldi cannot be built here: it runs only when asked for
    assert services["kaldi"]["profiles"] == ["kaldi"] and "profiles" not in services["decoder"]
    assert services["kaldi"]["depends_on"]["afp"]["condition"] == "service_healthy"
    mounts = services["kaldi"]["volumes"]
    assert any("kaldi-client.sh" in m for m in mounts)
    default_dir = re.search(r"\$\{LATTICE_DIR:-([^}]+)\}", mounts[0]).group(1)
    assert (DOCKER / default_dir / "lat.1.gz").is_file() and (DOCKER / default_dir / "words.txt").is_file()


@pytest.mark.skipif(shutil.which("curl") is None and shutil.which("python3") is None, reason="needs curl or python3")
def test_kaldi_client_script_against_a_live_server(tmp_path):
    from tests.service.test_server_process import start_server

    fakes = tmp_path / "bin"
    fakes.mkdir()
    # stand-ins for Kaldi's tools: lattice-copy "ark:gunzip -c FILE |" ark,t:- and utils/int2sym.pl -f 3 words.txt
    (fakes / "lattice-copy").write_text('#!/usr/bin/env bash\nspec=${1#ark:}; eval "${spec%|}"\n')
    (fakes / "int2sym.pl").write_text(
        "#!/usr/bin/env python3\nimport sys\nfield=int(sys.argv[2])-1\n"
        "table=dict(l.split()[::-1] for l in open(sys.argv[3]) if l.strip())\n"
        "for line in sys.stdin:\n f=line.split()\n if len(f)>field and f[field].isdigit(): f[field]=table[f[field]]\n"
        " print(' '.join(f))\n")
    for tool in fakes.iterdir():
        tool.chmod(0o755)
    process, url = start_server(REPO / "models" / "conversational", "--processes", "1", "--no-access-log")
    try:
        env = {**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}", "AFP_URL": url,
               "INT2SYM": str(fakes / "int2sym.pl")}
        done = subprocess.run(["bash", str(DOCKER / "kaldi-client.sh"), str(REPO / "examples" / "kaldi")],
                              env=env, capture_output=True, text=True, timeout=120)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert done.returncode == 0, done.stderr
    results = [r for line in done.stdout.splitlines() if line.strip() for r in json.loads(line)["results"]]
    assert [r["key"] for r in results] == ["utt-example-1", "utt-example-2"]
    assert results[0]["best"]["words"] == ["YEAH", "I", "THINK", "SO"]
    with gzip.open(REPO / "examples" / "kaldi" / "lat.1.gz", "rt") as f:
        assert f.readline().strip() == "utt-example-1"


def test_compose_decoder_service_runs_the_pocketsphinx_client_on_the_librivox_clips():
    """The decoder image copies the client to the path compose runs, waits for /readyz itself
    (podman-compose ignores depends_on conditions) and posts to the afp service."""
    decoder = yaml.safe_load((DOCKER / "compose.yml").read_text())["services"]["decoder"]
    command = " ".join(decoder["entrypoint"] + decoder["command"])
    copied = re.search(r"^COPY examples/pocketsphinx_client.py (\S+)$", DECODER.read_text(), re.M).group(1)
    assert f"python {copied} --server" in command and "--wait" in command and "/audio/*.wav" in command
    assert decoder["environment"]["AFP_URL"] == "http://afp:8000" and "$$AFP_URL" in command
    assert decoder["depends_on"] == ["afp"]
    audio = re.search(r"\$\{AUDIO_DIR:-([^}]+)\}:/audio:ro", decoder["volumes"][0]).group(1)
    assert len(list((DOCKER / audio).glob("*.wav"))) == 5
    # the pinned PocketSphinx is one the project's decoder extra accepts
    pin = re.search(r"pocketsphinx==([\d.]+)", DECODER.read_text()).group(1)
    spec = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["decoder"][0]
    assert tuple(map(int, pin.split("."))) >= tuple(map(int, spec.split(">=")[1].split(".")))


def test_check_mounts_this_machines_pip_settings(tmp_path, monkeypatch):
    """docker/check.py merges the pip configuration into one pip.conf and mounts the paths it
    names; a file:// index is mounted from its parent (its pages link to ../../files/)."""
    monkeypatch.setattr(docker_check, "WORK", tmp_path / "work")
    (tmp_path / "mirror" / "simple").mkdir(parents=True)
    (tmp_path / "wheels").mkdir()
    bundle = tmp_path / "ca.crt"
    bundle.write_text("")
    settings = {"global": {"cert": str(bundle), "find-links": str(tmp_path / "wheels"),
                           "extra-index-url": f"file://{tmp_path}/mirror/simple https://example.org/simple",
                           "default-timeout": "180"}}
    conf, paths = docker_check.build_mounts(settings)
    assert conf.read_text().startswith("[global]\ncert = ")
    assert "default-timeout = 180" in conf.read_text()
    assert paths == sorted([bundle, tmp_path / "wheels", tmp_path / "mirror"])


def test_check_parses_pip_config_list(monkeypatch):
    listed = ("global.cert='/etc/ssl/certs/ca-certificates.crt'\nglobal.find-links='/opt/wheels'\n"
              ":env:.find-links='/srv/wheels'\ninstall.no-compile='1'\n")
    monkeypatch.setattr(docker_check, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, listed))
    assert docker_check.pip_settings() == {"global": {"cert": "/etc/ssl/certs/ca-certificates.crt",
                                                      "find-links": "/srv/wheels"},
                                           "install": {"no-compile": "1"}}


def test_check_compares_answers_as_the_parity_test_does():
    """Issue 38: the container's answer differs from the host's in the seventh digit on another
    CPU; a 1e-6 difference passes (and is reported as the largest seen), 1e-3 fails, and words,
    n-best order and timings are compared as the parity test compares doors."""
    host = [{"key": "u1", "best": {"words": ["A"], "lm_logprob": -10.653839904700067}, "seconds": 0.5,
             "nbest": [{"words": ["A"], "score": -1.0}, {"words": ["B"], "score": -2.0}]}]
    container = json.loads(json.dumps(host))
    container[0]["best"]["lm_logprob"] = -10.653841080509824  # what the AMD machine printed (1.2e-6 off)
    container[0]["seconds"] = 9.0
    near = docker_check.same(host, container)
    assert near.same, near.difference
    assert near.largest == pytest.approx(1.1758e-6, rel=1e-3) and near.largest_at == "[0].best.lm_logprob"
    assert "1.18e-06" in near.describe()
    container[0]["best"]["lm_logprob"] = -10.653839904700067 - 1e-3
    far = docker_check.same(host, container)
    assert not far.same and far.difference.startswith("[0].best.lm_logprob") and "off by 0.001" in far.difference
    swapped = json.loads(json.dumps(host))
    swapped[0]["nbest"].reverse()
    assert docker_check.same(host, swapped).difference.startswith("[0].nbest[0].")
    fewer = json.loads(json.dumps(host))
    fewer[0]["nbest"].pop()
    assert "2 items != 1" in docker_check.same(host, fewer).difference


def test_check_skips_plainly_without_an_engine(monkeypatch, capsys):
    """Not root, no docker daemon, no podman: "skipped", exit 0 (CI goes on)."""
    monkeypatch.setattr(docker_check.shutil, "which", lambda name: None)
    monkeypatch.setattr(docker_check.os, "geteuid", lambda: 1000)
    assert docker_check.main([]) == 0
    assert "docker-check: skipped: no docker daemon answers and podman is not installed" in capsys.readouterr().out
