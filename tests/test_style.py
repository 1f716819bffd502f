"""The code is lint-clean and formatted: ruff (lint, import order, format) on the Python code and clang-format on
the C++/CUDA code, with the configurations in pyproject.toml and .clang-format. Both tools come with the [test]
extra at pinned versions, so this runs wherever the tests run."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]' installs it)")
    return path


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_lint_is_clean():
    result = run(tool("ruff"), "check", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean():
    result = run(tool("ruff"), "format", "--check", ".")
    assert result.returncode == 0, "run 'ruff format .':\n" + result.stdout + result.stderr


def test_clang_format_is_clean():
    files = run("git", "ls-files", "plugin/*.cpp", "plugin/*.h", "plugin/*.cu", "plugin/*.cuh").stdout.split()
    if not files:  # not a git checkout (e.g. an sdist): nothing to compare against
        pytest.skip("no git checkout: the C++ file list comes from git ls-files")
    result = run(tool("clang-format"), "--dry-run", "--Werror", *files)
    assert result.returncode == 0, "run 'clang-format -i' on:\n" + result.stderr[-4000:]
