"""``afp serve``'s settings as a library call (:mod:`service.startup`): the flags over the
environment, every path checked before anything is loaded."""

from __future__ import annotations

import pytest

from service.startup import SettingsError, server_settings


def test_the_flags_given_override_the_environment(model_dir, monkeypatch):
    monkeypatch.setenv("AFP_PORT", "8123")
    monkeypatch.setenv("AFP_WORKERS", "3")
    settings = server_settings({"model_dir": str(model_dir), "port": 9000, "host": None, "batching": False})
    assert settings.model_dir == model_dir and settings.port == 9000 and settings.workers == 3
    assert settings.host == "127.0.0.1" and settings.batching is False


def test_every_path_is_checked_in_one_line(model_dir, tmp_path):
    cases = [({"model_dir": str(tmp_path / "none")}, f"{tmp_path / 'none'}: not a model directory"),
             ({"model_dir": str(tmp_path / "none.arpa")}, f"{tmp_path / 'none.arpa'}: no such ARPA file"),
             ({"old_lm": str(tmp_path / "old.arpa")}, f"{tmp_path / 'old.arpa'}: no such file or n-gram model directory \\(--old-lm / AFP_OLD_LM\\)"),
             ({"features": f"acausal={tmp_path}"}, f"feature 'acausal': {tmp_path}: not a model directory"),
             ({"features": "bad"}, "--feature 'bad': expected NAME=MODEL_DIR"),
             ({"port": 99999}, "^invalid server settings: 1 validation error for Settings\nport\n")]
    for overrides, message in cases:
        with pytest.raises(ValueError, match=message):
            server_settings({"model_dir": str(model_dir), **overrides})
    weights = tmp_path / "w.json"
    weights.write_text('{"lm_weight": "x"}')
    with pytest.raises(ValueError, match="w.json: field lm_weight: expected a finite number"):
        server_settings({"model_dir": str(model_dir), "weights": str(weights)})
    assert issubclass(SettingsError, ValueError)


def test_processes_auto_follows_the_device_and_a_bad_value_is_named(model_dir, capsys):
    from afp.workers import available_cores
    from service.cli import main
    from service.settings import Settings

    assert Settings(processes="auto").process_count("cpu") == available_cores()
    assert Settings(processes="AUTO").process_count("cuda") == 1  # one process feeds a GPU, its scoring batched
    assert Settings(processes=3).process_count("cuda") == 3
    for bad in (0, -1, "many"):
        with pytest.raises(ValueError, match=r"processes .*expected a positive integer or 'auto'"):
            server_settings({"model_dir": str(model_dir), "processes": bad})
    with pytest.raises(SystemExit):
        main(["serve", "--model", str(model_dir), "--processes", "0"])
    assert "argument --processes: '0': expected a positive integer or 'auto'" in capsys.readouterr().err
