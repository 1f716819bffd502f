"""README's Quick start and .ci/run agree: CI runs exactly the README's two commands."""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def quick_start_commands():
    """The same extraction .ci/run performs."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.strip() for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_readme_has_exactly_two_quick_start_commands():
    install_and_demo, tests = quick_start_commands()
    assert install_and_demo == "pip install torch==2.13.0 -e . && wtconv-trt demo"
    assert tests == (
        'pip install torch==2.13.0 -e ".[test]" && pip install --no-deps nvidia-pytriton==0.7.0 '
        "&& python -m pytest -q -n 2"
    )


def test_ci_run_reads_the_readme_and_fails_loudly():
    script = ROOT / ".ci" / "run"
    text = script.read_text(encoding="utf-8")
    assert os.access(script, os.X_OK)
    assert "set -euo pipefail" in text
    assert '"\\n## Quick start"' in text and "```bash" in text  # the extraction above, same markers
    assert "python3 -m venv" in text and "junitxml" in text


def test_test_extra_installs_what_the_tests_import():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    test_extra = " ".join(meta["project"]["optional-dependencies"]["test"]).lower()
    for package in ("pytest", "pywavelets", "scikit-learn"):
        assert package in test_extra
    assert meta["project"]["scripts"]["wtconv-trt"] == "wtconv_trt.cli:run_command"
    # scikit-build-core copies each listed package whole, its data files included (wtconv_torch/data/): every
    # package of the checkout is listed, and nothing else (benchmarks/, tests/ stay out of the wheel).
    listed = set(meta["tool"]["scikit-build"]["wheel"]["packages"])
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"benchmarks", "tests", "samples", "tools"}
    assert listed == packages, listed ^ packages
    assert (ROOT / "wtconv_torch" / "data" / "default_model.safetensors").is_file()
