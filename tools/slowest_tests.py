#!/usr/bin/env python3
"""The slowest test files of the recorded runs: `make test-slowest` (the record: build/test-durations.json,
seconds per file, merged by test/conftest.py after every `make test` / `make test-fast`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else Path("build/test-durations.json")
    count = int(argv[2]) if len(argv) > 2 else 20
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        print(f"no durations recorded yet ({path}): run `make test` or `make test-fast` first",
              file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"cannot read {path}: {exc}", file=sys.stderr)
        return 1
    rows = sorted(((float(s), f) for f, s in record.items()), reverse=True)
    total = sum(s for s, _ in rows)
    print(f"{'seconds':>8}  {'share':>6}  file   ({len(rows)} files, {total:.0f} s recorded in {path})")
    for seconds, name in rows[:count]:
        print(f"{seconds:8.1f}  {100 * seconds / max(total, 1e-9):5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
