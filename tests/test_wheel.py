"""interp as users get it: the built wheel, installed without ``-e`` and without the dev extras
into a fresh virtual environment, run from a folder outside the source tree (issue 33, item 3).

The default test installs only the interp wheel (``--no-deps``) and lets the new environment see
the test environment's packages through a ``.pth`` file, so it runs in about a minute; the slow
one installs the wheel with its dependencies from the package index, as ``pip install interp``
would. Both run ``interp --version``, ``interp worlds`` and the main job's first stage
(``interp train`` on the embedded demo recipe, which starts from the shipped demo model — found
inside the installed package — and runs the next-token test).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: what a source distribution carries: the wheel is built from a copy of these only
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "interp")


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _clean_env() -> dict[str, str]:
    """The environment without anything that would put the source tree on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def _package_files(root: Path) -> set[str]:
    """Every file of the ``interp`` package under ``root`` (no bytecode), as wheel paths."""
    return {
        p.relative_to(root).as_posix()
        for p in (root / "interp").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built offline (``pip wheel --no-build-isolation``) from a copy of the sources."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, src / name)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp / "dist"),
            str(src),
        ],
        tmp,
        _clean_env(),
    )
    wheels = list((tmp / "dist").glob("interp-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_the_wheel_holds_the_package_and_its_data_and_nothing_else(wheel):
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert wheel.name.startswith(f"interp-{version}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    package = {n for n in names if n.startswith("interp/")}
    assert package == _package_files(REPO), (  # every module and data file, the shipped demo model included
        f"missing from the wheel: {sorted(_package_files(REPO) - package)}; "
        f"extra: {sorted(package - _package_files(REPO))}"
    )
    for shipped in (
        "interp/demo_model/manifest.json",
        "interp/demo_model/train_log.csv",
        "interp/demo_model/checkpoint/model.safetensors",
        "interp/demo_model/checkpoint/config.json",
    ):
        assert shipped in names
    others = {n.split("/")[0] for n in names} - {"interp"}
    assert others == {f"interp-{version}.dist-info"}, others  # no tests/, docs/, bench/, experiments/


def _fresh_env(tmp: Path, see_packages_of: Path | None) -> Path:
    """A new virtual environment in ``tmp/env``; with ``see_packages_of`` (a site-packages folder),
    a ``.pth`` file puts those packages on its path, after its own."""
    env_dir = tmp / "env"
    _run([sys.executable, "-m", "venv", str(env_dir)], tmp, _clean_env())
    if see_packages_of is not None:
        site = Path(
            _run(
                [str(env_dir / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                tmp,
                _clean_env(),
            ).strip()
        )
        (site / "dev-packages.pth").write_text(f"{see_packages_of}\n")
    return env_dir


def _check_installed(env_dir: Path, workdir: Path) -> None:
    """``interp --version``, ``interp worlds`` and the main job's first stage from the installed
    package, run in ``workdir`` (outside the source tree)."""
    env = _clean_env()
    python, interp = str(env_dir / "bin" / "python"), str(env_dir / "bin" / "interp")
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    where = json.loads(
        _run(
            [
                python,
                "-c",
                "import json, interp, importlib.metadata as m; "
                "print(json.dumps([interp.__file__, m.version('interp'), interp.__version__]))",
            ],
            workdir,
            env,
        )
    )
    package = Path(where[0]).resolve().parent
    assert package.is_relative_to(env_dir.resolve()) and not package.is_relative_to(REPO), where
    assert where[1:] == [version, version]

    assert _run([interp, "--version"], workdir, env).strip() == f"interp {version}"
    worlds = _run([interp, "worlds"], workdir, env)
    assert "streets" in worlds and "dfa" in worlds

    # the first stage of `interp run`: data, then the shipped demo model (the embedded recipe), next-token test
    (workdir / "first.toml").write_text("eval_sequences = 100\n")  # not a recipe key: the shipped model applies
    out = _run([interp, "train", "--config", "first.toml", "--no-progress"], workdir, env)
    run_dir = Path(out.strip().splitlines()[-1])
    assert run_dir == workdir / "runs" / "demo"
    assert f"the shipped demo model ({package / 'demo_model'}" in out, out
    results = json.loads((run_dir / "results.json").read_text())
    assert Path(results["train"]["shipped"]["path"]) == package / "demo_model"
    assert results["next_token"]["sequences"] == 100  # the shipped model's routes are legal, as its manifest says
    assert results["next_token"]["next_token_sequence"] >= 0.95, results["next_token"]
    assert (run_dir / "best" / "model.safetensors").is_file()


def test_the_installed_wheel_runs_outside_the_source_tree(wheel, tmp_path):
    """The wheel alone (``--no-deps``; the dependencies come from this environment's packages)."""
    env_dir = _fresh_env(tmp_path, see_packages_of=Path(sysconfig.get_paths()["purelib"]))
    # installed before anything else is on the new environment's path, so pip sees only it
    _run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        tmp_path,
        _clean_env(),
    )
    work = tmp_path / "work"
    work.mkdir()
    _check_installed(env_dir, work)


@pytest.mark.slow
def test_the_wheel_installs_with_its_dependencies_from_the_index(wheel, tmp_path):
    """``pip install interp-*.whl`` into a bare environment: every dependency from the package
    index (torch first, pinned as the Makefile pins it, so pip takes the CPU wheel)."""
    env_dir = _fresh_env(tmp_path, see_packages_of=None)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q"]
    _run([*pip, os.environ.get("TORCH", "torch==2.13.0")], tmp_path, _clean_env(), timeout=1800)
    _run([*pip, str(wheel)], tmp_path, _clean_env(), timeout=1800)
    work = tmp_path / "work"
    work.mkdir()
    _check_installed(env_dir, work)
