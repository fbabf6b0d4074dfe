"""The atheris fuzz target (``fuzz_atheris.py``) runs a few hundred coverage-guided inputs
without a failure, and does report a broken handler. Skipped where atheris is not installed
(``pip install -e '.[fuzz]'``; wheels exist for CPython on Linux x86_64)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")

ROOT = Path(__file__).resolve().parents[2]


def fuzz(tmp_path: Path, runs: int, **env: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "tests.security.fuzz_atheris", f"-runs={runs}",
         "-max_total_time=60", f"-artifact_prefix={tmp_path}/", "-print_final_stats=1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": path, "MAGNETAR_FUZZ_DIR": str(tmp_path / "data"),
             **env},
    )


def test_atheris_fuzz_target_finds_nothing(tmp_path: Path) -> None:
    done = fuzz(tmp_path, 300)
    assert done.returncode == 0, done.stderr[-3000:]
    executed = re.search(r"stat::number_of_executed_units: (\d+)", done.stderr)
    assert executed and int(executed.group(1)) > 0, done.stderr[-3000:]
    assert int(re.search(r"stat::new_units_added: +(\d+)", done.stderr).group(1)) > 0  # type: ignore[union-attr]
    assert not list(tmp_path.glob("crash-*"))


def test_atheris_fuzz_target_reports_a_broken_handler(tmp_path: Path) -> None:
    done = fuzz(tmp_path, 5000, MAGNETAR_FUZZ_SELF_TEST="1")
    assert done.returncode != 0
    assert "failed to handle LOOKUP" in done.stdout + done.stderr  # (the traceback: stdout)
    assert list(tmp_path.glob("crash-*"))
