"""noxfile.py's own logic: the pyenv versions it makes visible to nox.

noxfile.py is loaded with a stand-in for ``nox`` (the test venvs do not install nox); only
its module-level code runs: the session functions are never called.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from unittest import mock

import pytest

NOXFILE = Path(__file__).resolve().parent.parent / "noxfile.py"
INSTALLED = ["3.10.14", "3.11.9", "3.12.1", "3.12.10", "3.13.2"]


def _load_noxfile():
    spec = importlib.util.spec_from_file_location("noxfile_under_test", NOXFILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with mock.patch.dict(sys.modules, {"nox": mock.MagicMock(name="nox")}):
        spec.loader.exec_module(module)
    return module


@pytest.fixture
def pyenv_root(tmp_path, monkeypatch):
    for name in INSTALLED:
        minor = ".".join(name.split(".")[:2])
        bin_dir = tmp_path / "versions" / name / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / f"python{minor}").touch()
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("existing", "expected"),
    [
        (None, "3.10.14:3.11.9:3.12.10:3.13.2"),
        # `pyenv shell 3.12`: the user's choice stays first (it is what `python` runs),
        # and the versions nox needs are added after it
        ("3.12", "3.12:3.10.14:3.11.9:3.12.10:3.13.2"),
        ("3.12.1", "3.12.1:3.10.14:3.11.9:3.12.10:3.13.2"),
        ("3.11.9:system", "3.11.9:system:3.10.14:3.12.10:3.13.2"),
        ("", "3.10.14:3.11.9:3.12.10:3.13.2"),
    ],
)
def test_pyenv_version_keeps_the_users_and_adds_the_missing(
    pyenv_root, monkeypatch, existing, expected
):
    if existing is None:
        monkeypatch.delenv("PYENV_VERSION", raising=False)
    else:
        monkeypatch.setenv("PYENV_VERSION", existing)
    _load_noxfile()  # noxfile sets PYENV_VERSION when it is loaded
    assert os.environ["PYENV_VERSION"] == expected


def test_pyenv_version_without_pyenv_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))  # no versions/ at all
    monkeypatch.setenv("PYENV_VERSION", "3.12")
    _load_noxfile()
    assert os.environ["PYENV_VERSION"] == "3.12"
    monkeypatch.delenv("PYENV_VERSION")
    _load_noxfile()
    assert "PYENV_VERSION" not in os.environ


def test_pyenv_version_list(pyenv_root, monkeypatch):
    monkeypatch.delenv("PYENV_VERSION", raising=False)
    noxfile = _load_noxfile()
    assert noxfile.pyenv_version_list(None, ["3.13.2"]) == "3.13.2"
    assert noxfile.pyenv_version_list("3.13.2:3.12", ["3.12.1", "3.13.2"]) == "3.13.2:3.12:3.12.1"
