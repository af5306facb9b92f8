"""Pack the real nights of bench/nightly/build_nights.sh into their raw folder: the state folder's records as they are
(`<OUT>/state-nights/`), and a copy whose logs point at copies under the raw folder (`<OUT>/nights/`, what
`nightly --replay --built <OUT>` merges, so the history page links logs that live in the repository). A log under
LIMIT bytes is copied whole; a longer one (a build's compiler output) as its summary: its first and last lines,
with the count of lines left out and of the compiler's warnings.

    python bench/nightly/pack_builds.py bench/nightly/raw/local-2c-builds-2026-12-07 --state /work/.bench-nightly/state
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 64_000
HEAD, TAIL = 15, 40


def summary(text: str) -> str:
    lines = text.splitlines()
    if len(text.encode()) <= LIMIT:
        return text
    warnings = sum(1 for line in lines if re.search(r"\bwarning\b", line, re.IGNORECASE))
    left = len(lines) - HEAD - TAIL
    return "\n".join([*lines[:HEAD], f"... {left} line(s) left out of this summary ({len(lines)} in all, "
                      f"{warnings} with 'warning') ...", *lines[-TAIL:]]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the raw folder build_nights.sh wrote")
    ap.add_argument("--state", type=Path, required=True, help="the nights' state folder (WORK/state)")
    args = ap.parse_args()
    out = args.out.resolve()
    for folder in ("nights", "state-nights"):
        shutil.rmtree(out / folder, ignore_errors=True)
        (out / folder).mkdir()
    for path in sorted((args.state / "nights").glob("*.json")):
        shutil.copyfile(path, out / "state-nights" / path.name)
        rec = json.loads(path.read_text())
        night_dir = out / f"{rec['night']}-{rec['upstream']['commit'][:12]}" / "logs"
        logs = {}
        for stage, log in sorted(rec.get("logs", {}).items()):
            source = Path(log)
            if not source.is_file():
                logs[stage] = log
                continue
            night_dir.mkdir(parents=True, exist_ok=True)
            target = night_dir / f"{stage}{''.join(source.suffixes[-1:]) or '.log'}"
            target.write_text(summary(source.read_text(errors="replace")))
            logs[stage] = target.relative_to(ROOT).as_posix()  # the page is written from the repository's root
        rec["logs"] = logs
        (out / "nights" / path.name).write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")
        print(out / "nights" / path.name)


if __name__ == "__main__":
    main()
