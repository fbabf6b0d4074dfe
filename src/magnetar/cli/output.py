"""How the CLI prints results: ``--output table`` (people: lists one per line, flat
objects as aligned key/value rows, nested ones as indented JSON) or ``--output json``
(scripts: exactly the JSON the API returned, one document)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO


def add_late_options(parser: argparse.ArgumentParser, url_flag: str, url_help: str) -> None:
    """Let ``--output`` and the URL option also follow a leaf command's own arguments
    (``magnetar admin topics stats T --output json``); given earlier, they still count."""
    parser.add_argument("--output", "-o", choices=["table", "json"], default=argparse.SUPPRESS,
                        help="table (default) or json")
    parser.add_argument(url_flag, default=argparse.SUPPRESS, help=url_help)


def emit(result: Any, fmt: str, out: TextIO | None = None) -> None:
    """Print ``result`` (None prints nothing in table form, ``null`` in JSON)."""
    out = sys.stdout if out is None else out
    if fmt == "json":
        print(json.dumps(result, indent=2, sort_keys=False), file=out)
        return
    if result is None:
        return
    if isinstance(result, list) and all(not isinstance(x, dict | list) for x in result):
        for item in result:
            print(item, file=out)
    elif isinstance(result, list) and result and all(isinstance(x, dict) for x in result):
        print(table(result), file=out)
    elif isinstance(result, dict) and all(not isinstance(v, dict | list) for v in result.values()):
        width = max((len(str(k)) for k in result), default=0)
        for key, value in result.items():
            print(f"{str(key).ljust(width)}  {_cell(value)}", file=out)
    elif isinstance(result, dict | list):
        print(json.dumps(result, indent=2), file=out)
    else:
        print(result, file=out)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def table(rows: list[dict[str, Any]]) -> str:
    """Rows of dicts as a text table with a header (columns: the first row's keys)."""
    columns = list(rows[0])
    cells = [[_cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)
