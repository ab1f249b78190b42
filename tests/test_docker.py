"""The Docker deployment, checked without a Docker engine: lint, the image's entry command and
health check run outside Docker, the compose file's references, and the Kaldi client script."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.service.test_server_process import free_port

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
DOCKERFILES = [DOCKER / "Dockerfile.cpu", DOCKER / "Dockerfile.cuda"]


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
    done = subprocess.run([hadolint, *map(str, DOCKERFILES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_are_multistage_non_root_with_healthcheck(dockerfile):
    text = dockerfile.read_text()
    assert text.count("\nFROM ") + text.startswith("FROM ") >= 2  # multi-stage
    stage = final_stage(dockerfile)
    user = instruction(stage, "USER")
    assert user not in ("root", "0")
    assert "/healthz" in instruction(stage, "HEALTHCHECK")
    assert "/models" in instruction(stage, "VOLUME")
    # dependencies are installed before the code is copied
    assert text.index("pyproject.toml") < text.index("COPY lm lm")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_hold_every_package_the_project_installs(dockerfile):
    """Every top-level package of pyproject.toml's list is copied (and stands in, empty, in the
    dependency layer): a package left out installs an image whose server cannot start."""
    import tomllib

    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = [name.rstrip("*") for name in include]
    assert {"lm", "lattices", "afp", "service"} <= set(packages)
    text = dockerfile.read_text()
    for package in packages:
        assert f"COPY {package} {package}" in text, package
        assert f"{package}/__init__.py" in text, package


def test_entry_command_and_healthcheck_work_outside_docker():
    stage = final_stage(DOCKER / "Dockerfile.cpu")
    command = json.loads(instruction(stage, "ENTRYPOINT")) + json.loads(instruction(stage, "CMD"))
    healthcheck = json.loads(instruction(stage, "HEALTHCHECK").split("CMD", 1)[1])
    env = {**os.environ, **image_env(stage), "PYTHONPATH": str(REPO)}
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
        models = httpx.get(f"http://127.0.0.1:{env['AFP_PORT']}/v1/models").json()["models"]
        assert models[0]["name"] == "conversational"
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)


def test_compose_file_references_exist():
    compose = yaml.safe_load((DOCKER / "compose.yml").read_text())
    services = compose["services"]
    assert {"afp", "afp-gpu", "kaldi"} <= set(services)
    for name in ("afp", "afp-gpu"):
        assert (DOCKER / ".." / services[name]["build"]["dockerfile"]).resolve().is_file()
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
    process, url = start_server(REPO / "models" / "conversational", "--no-access-log")
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
