"""The README's configuration section names exactly the keys the broker implements, and its
quick start runs as written."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

from magnetar.broker.config import BrokerConfig

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_lists_every_implemented_key_and_no_other() -> None:
    text = README.read_text()
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([a-z][A-Za-z]+)`", section))
    implemented = {f.name for f in dataclasses.fields(BrokerConfig) if f.name != "unknown_keys"}
    assert implemented - listed == set(), "implemented but not in the README"
    assert {k for k in listed - implemented if k[0].islower() and any(c.isupper() for c in k)} == set()


def quick_start() -> list[str]:
    """The command lines of the README's quick start block (comments kept: bash drops them)."""
    text = README.read_text()
    block = text.split("The quick start, with `magnetar standalone` running", 1)[1]
    block = block.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_quick_start_runs_top_to_bottom_as_written(tmp_path: Path) -> None:
    """The block, line by line in one shell (``set -e``) in an empty directory (a fresh
    clone's), against a broker of its own (reached through $MAGNETAR_SERVICE_URL and
    $MAGNETAR_ADMIN_URL, as the README says): every command finishes and succeeds."""
    from magnetar.testing import standalone

    lines = quick_start()
    assert any(line.startswith("magnetar client consume") for line in lines)
    script = "set -euo pipefail\nmagnetar() { \"$PYTHON\" -m magnetar.cli.main \"$@\"; }\n" + "\n".join(lines)
    with standalone() as broker:
        env = dict(os.environ, PYTHON=sys.executable,
                   MAGNETAR_SERVICE_URL=broker.service_url, MAGNETAR_ADMIN_URL=broker.web_service_url,
                   PYTHONPATH=os.pathsep.join(p for p in (str(README.parent / "src"),
                                                          os.environ.get("PYTHONPATH")) if p))
        out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("content:hello") == 10
    assert "10 messages successfully consumed" in out.stderr
    assert "persistent://acme/orders/new" in out.stdout
