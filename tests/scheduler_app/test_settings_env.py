"""Platform keys may come from files (`NAME_FILE`), as mounted Docker/Kubernetes secrets."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from project.settings.env import env_secret

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_key_is_read_from_its_file(tmp_path, monkeypatch):
    key_file = tmp_path / "secret_key"
    key_file.write_text("from-a-file\n")
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.setenv("SECRET_KEY_FILE", str(key_file))
    assert env_secret("SECRET_KEY", "default") == "from-a-file"


def test_without_a_file_the_variable_or_the_default_is_used(monkeypatch):
    monkeypatch.delenv("SECRET_KEY_FILE", raising=False)
    monkeypatch.delenv("SECRET_KEY", raising=False)
    assert env_secret("SECRET_KEY", "default") == "default"
    monkeypatch.setenv("SECRET_KEY", "from-env")
    assert env_secret("SECRET_KEY", "default") == "from-env"


def test_setting_both_is_refused(tmp_path, monkeypatch):
    key_file = tmp_path / "k"
    key_file.write_text("a")
    monkeypatch.setenv("SECRETS_KEY", "b")
    monkeypatch.setenv("SECRETS_KEY_FILE", str(key_file))
    with pytest.raises(ValueError, match="not both"):
        env_secret("SECRETS_KEY")


def test_production_settings_take_all_three_keys_from_files(tmp_path):
    files = {
        "SECRET_KEY": "k7Hq2-xW9pLz4vR8mN3bT6yJ1cF5gD0sA-eU2iO7pQ4wE9rT1yU6iO3pA8sD5fG2hJ",
        "SECRETS_KEY": "Zm9vYmFyZm9vYmFyZm9vYmFyZm9vYmFyZm9vYmFyMTI=",
        "DATABASE_URL": "postgres://app:pw@db.internal:5432/scheduler",
    }
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": ROOT}
    for name, value in files.items():
        (tmp_path / name).write_text(value)
        env[f"{name}_FILE"] = str(tmp_path / name)
    printed = subprocess.run(
        [
            sys.executable,
            "-c",
            "from project.settings import production as s; "
            "d = s.DATABASES['default']; "
            "print(s.SECRET_KEY, s.SECRETS_KEY, d['HOST'], d['PASSWORD'])",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert printed == [files["SECRET_KEY"], files["SECRETS_KEY"], "db.internal", "pw"]
