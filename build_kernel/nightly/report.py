"""The morning report: Markdown and JSON whose first lines say new wheel or not, why not, and what changed;
written beside the records (`<state>/report.md`, `<state>/report.json`, the newest night's) and, when the user
config names one, POSTed as JSON to a webhook:

    [nightly]                                  # ~/.config/build-kernel/config.toml (or $BUILD_KERNEL_CONFIG)
    webhook = "https://hooks.example.internal/build-kernel"

A webhook that does not answer is a warning: the night's outcome is the record's, not the chat's.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from build_kernel import atomic, log
from build_kernel.mirrors import default_config_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

WEBHOOK_TIMEOUT_S = 10.0


def headline(record: Mapping[str, Any]) -> str:
    """The first line: new wheel or not."""
    wheel = record.get("wheel") or {}
    if record["outcome"] == "built":
        return f"{record['recipe']} {record['night']}: new wheel {wheel.get('name')}"
    newest = f" (newest stays {record['newest_wheel']})" if record.get("newest_wheel") else ""
    return f"{record['recipe']} {record['night']}: no new wheel, {record['outcome']}{newest}"


def changes(record: Mapping[str, Any]) -> list[str]:
    """What changed since the last good night: upstream, series, retired patches, pins."""
    up, series = record["upstream"], record["series"]
    said = []
    if up.get("previous_good") and up["commit"] != up["previous_good"]:
        said.append(f"upstream {up['ref']}: {up['previous_good'][:12]} -> {up['commit'][:12]} "
                    f"({up['commits_since']} commit(s))")
    elif not up.get("previous_good"):
        said.append(f"upstream {up['ref']}: {up['commit'][:12]} (the first good night to come)")
    if series.get("version"):
        said.append(f"series: {series['name']}")
    if series.get("retired"):
        said.append(f"retired (upstream has them): {', '.join(series['retired'])}")
    if series.get("conflict"):
        c = series["conflict"]
        said.append(f"conflict: {c['patch']}: {c['hunk']}"
                    + (f" (first bad upstream commit {c['first_bad_commit'][:12]})" if c.get("first_bad_commit") else ""))
    said += [f"lock: {c['pin']}: {c['from'] or 'none'} -> {c['to']}" for c in record.get("lock_changes", [])]
    return said or ["nothing"]


def markdown(record: Mapping[str, Any]) -> str:
    lines = [f"# {headline(record)}", "", f"**Why:** {record['reason']}", "",
             "**What changed:** " + "; ".join(changes(record)), ""]
    up = record["upstream"]
    if up.get("log"):
        lines += ["## Upstream commits", "", *(f"- `{line[:12]}`{line[12:]}" for line in up["log"]), ""]
    if record.get("build"):
        b = record["build"]
        cpu = f", compiler CPU {b['compiler_cpu_s']:.0f} s" if b.get("compiler_cpu_s") is not None else ""
        peak = f", peak {b['peak_rss_mb']:.0f} MB" if b.get("peak_rss_mb") is not None else ""
        lines += [f"**Build:** {', '.join(b['archs'])}: {b['wall_s']:.0f} s wall{cpu}{peak}", ""]
    tests = record["tests"]
    if tests["ran"]:
        passed = sum(f["passed"] for f in tests["per_file"].values())
        failed = sum(f["failed"] for f in tests["per_file"].values())
        lines += [f"**Tests:** {passed} passed, {failed} failed in {len(tests['per_file'])} file(s)", ""]
    elif tests.get("why_not") and record.get("build"):
        lines += [f"**Tests:** not run: {tests['why_not']}", ""]
    if record.get("wheel"):
        w = record["wheel"]
        lines += [f"**Wheel:** `{w['name']}` sha256 `{w['sha256'][:16]}…`"
                  + (f", published to {w['published_to']}" if w.get("published_to") else ""), ""]
    if record.get("logs"):
        lines += ["**Logs:** " + ", ".join(f"{stage} `{path}`" for stage, path in sorted(record["logs"].items())), ""]
    return "\n".join(lines)


def as_json(record: Mapping[str, Any]) -> dict[str, Any]:
    return {"headline": headline(record), "new_wheel": record["outcome"] == "built", "why": record["reason"],
            "changes": changes(record), "record": dict(record)}


def webhook_url(env: Mapping[str, str]) -> str | None:
    path = default_config_file(env)
    if not path.is_file():
        return None
    try:
        table = tomllib.loads(path.read_text()).get("nightly", {})
    except tomllib.TOMLDecodeError:
        log.warn(f"{path}: invalid TOML: no webhook for the morning report")
        return None
    url = table.get("webhook") if isinstance(table, dict) else None
    return url if isinstance(url, str) and url else None


def post(url: str, body: Mapping[str, Any]) -> str | None:
    """POST the report as JSON; None when it was taken (2xx), else why not (one line)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_S) as response:
            return None if 200 <= response.status < 300 else f"HTTP {response.status}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return str(getattr(exc, "reason", exc))


def write(state_dir: Path, record: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The report files (and the webhook's answer); what the report says."""
    body = as_json(record)
    atomic.write_text(state_dir / "report.md", markdown(record))
    atomic.write_text(state_dir / "report.json", json.dumps(body, indent=2) + "\n")
    if (url := webhook_url(env)) is not None:
        from build_kernel.process import redact

        problem = post(url, body)
        body["webhook"] = {"url": redact(url), "delivered": problem is None, "problem": problem}
        if problem:
            log.warn(f"the morning report was not delivered to the webhook {redact(url)}: {problem}")
    return body
