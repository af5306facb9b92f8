"""sgl-kernel's own tests against the tool's 9.0a wheel on the H200 host (issue 42 item 3), from raw outputs.

Three runs of the pruned recipe at 6ffc74ef for 9.0a (v8 below has FA3 on), built by the tool in the host's default environment
(CXX/CUDAHOSTCXX = a GCC with only libstdc++.a), FA3 off (its ~250 TUs do not fit a device call), then
`build-kernel test` (51 files, 4 at once, sglang of the same commit, offline from a wheelhouse):

- `v6`: series sm120/v6; test_kvcacheio died with SIGSEGV (cudaMemcpyBatchAsync called through CUDA 12.8's
  signature; fixed by 0009);
- `v7`: series sm120/v7 (v6 + 0009); cut off by the session's device time with 49 files finished and
  test_kvcacheio / test_sampling still running (their logs up to then are read);
- `v8`: series sm120/v8 (v7 + 0010) with FA3 on for head dims 64 + 256 in bf16 ([build] fa3 = "listed": 10 of
  upstream's 250 FA3 units), 6 files at once; plus bench/fa3_variants/probe_calls.py's calls (which FA3 calls the wheel runs,
  and its one line for the rest);
- `v7u`: the unpruned reference, series sm120/v7-unpruned (v7 without 0005, 0007, 0008: upstream's sources with
  only the CUDA 13 / torch fixes), FA3 off, 4 files at once, while the v8 wheel was compiled beside it (15 jobs
  on the same 16 cores). `pruned_vs_unpruned` compares it with v7 file by file;
- `shipped` (issue 53 item 4): the shipped nightly-cu130 for 9.0a with host lines only, judged by its own
  [test.expect];
- `t43` (issue 55 item 3): the shipped nightly-0.4 (sglang-kernel 0.4.3 @ 0753182b, series v9) for 9.0a, judged by
  its own [test.expect], with sglang of 0753182b (H100, 2026-12-06: test_flashmla found v9's missing sm100 symbols);
- `t43v12`: the same recipe on series v12, the fix (H200, 2026-12-06), judged the same way.
The last two wheels were built on the 2-core box against the host's torch (`pack --build`: that build's raw pack
gives build.json and verify.json); each report of them goes to a results file of its own.

`pack` keeps what this script reads of a device run (the build, verify and test JSON, the host line, and
per test file the JUnit XML without failure bodies and the `-v` result lines of its log: node ids and
outcomes, no upstream source lines), `report` writes the results file:

    python bench/upstream_tests/tests_report.py pack v6 RAW.tar.gz TEST-LOGS.tar.gz --out bench/upstream_tests/raw/h200-2026-12-03-tests/v6-raw.tar.gz
    python bench/upstream_tests/tests_report.py pack t43 t43-raw.tar.gz TEST-LOGS.tar.gz --build o43p-sm90a-2c-raw.tar.gz --out ...
    python bench/upstream_tests/tests_report.py report bench/upstream_tests/raw/h200-2026-12-03-tests/{v6,v7}-raw.tar.gz \
        bench/upstream_tests/raw/h200-2026-12-03-fa3/v8-raw.tar.gz bench/eta/raw/h200-2026-12-03-unpruned/v7u-raw.tar.gz \
        --out bench/upstream_tests/results/upstream-tests.json

Each file is judged with its run's recipe's [test.expect] (for 9.0a: RECIPES; nightly-cu130-pruned unless named)
plus the conditions of these runs, stated in RUN_CONDITIONS with their evidence.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from build_kernel.recipe import load
from build_kernel.recipe.model import Expectation
from build_kernel.stages.upstream_tests import runner, verdict

# What these runs did differently from the shipped recipe, each with how it shows: per run label.
FA3_OFF = (
    Expectation("test_flash_attention.py", "fail",
                "FA3 left out of these builds (-DSGL_KERNEL_FA3=OFF): every FA3 call raises the fallback's "
                "NotImplementedError", "each failure is 'NotImplementedError: sgl_kernel.flash_ops (FA3) could not be "
                "imported' (the v6 run's log: 1,008 of 1,008)"),
)
NO_NETWORK = (
    Expectation("test_gguf.py", "uncollectable",
                "it downloads its sample from the Hugging Face hub at import; the GPU host has no network",
                "LocalEntryNotFoundError / ConnectError 'Temporary failure in name resolution' at collection"),
)
# v8: FA3 on, for head dims 64 (the served tiny MoE) + 256 (the recipe's model); its expectations are the shipped
# recipe's own (the 64_256 kvcache tests' one-line error, by message).
# How v7u's host differed from the others' (their tests ran after their build, on an idle host).
UNPRUNED_LOAD = "v7u's tests ran while the v8 wheel was compiled beside them (15 compile jobs on the same 16 cores)"
# shipped (issue 53): the shipped recipe as it is for 9.0a (FA3 for its model's head dim 256), host lines only.
RUN_CONDITIONS = {"v6": FA3_OFF + NO_NETWORK, "v7": FA3_OFF + NO_NETWORK, "v8": NO_NETWORK, "v7u": FA3_OFF + NO_NETWORK,
                  "shipped": NO_NETWORK, "t43": NO_NETWORK, "t43v12": NO_NETWORK}
# The recipe whose [test.expect] judges a run, and the issue it answers (issue 42's runs: nightly-cu130-pruned).
RECIPES = {"shipped": "nightly-cu130", "t43": "nightly-0.4", "t43v12": "nightly-0.4"}
ISSUES = {"shipped": 53, "t43": 55, "t43v12": 55}
DESCRIPTIONS = {
    "shipped": "nightly-cu130 as shipped for 9.0a (FA3 for its model's head dim 256, bf16), host lines only",
    "t43": "nightly-0.4 as shipped (sglang-kernel 0.4.3 @ 0753182b, series sm120/v9) for 9.0a (FA3 for head dim 256, "
           "bf16), host lines only, sglang of 0753182b",
    "t43v12": "the same on series sm120/v12 (the fix of v9's FlashMLA SM100 gap), as nightly-0.4 ships now",
}
ISSUE_42 = ("nightly-cu130-pruned for 9.0a (v6, v7: FA3 off; v8: FA3 for head dims 64 + 256, bf16; v7u: its unpruned "
            "reference, FA3 off)")
_RESULT = re.compile(r"^(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b|^(\S+::\S+)\s*$")


def pack(label: str, raw: Path, logs: Path, out: Path, build: Path | None = None) -> None:
    """The parts of a device run this script reads, without upstream source lines. `build`: the raw pack of the
    build that made the tested wheel elsewhere (bench/arch_builds/build_one.sh's `<label>/build.json, verify.json, ...`)."""
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(out, "w:gz") as dst:
        t = Path(tmp)
        with tarfile.open(raw) as src:
            src.extractall(t / "raw", filter="data")
        found: dict[str, Path] = {}
        if build is not None:
            with tarfile.open(build) as src:
                src.extractall(t / "build", filter="data")
            found = {p.name: p for p in (t / "build").rglob("*") if p.name in ("build.json", "verify.json",
                                                                               "ninja_log.txt")}
        for name in ("build.json", "verify.json", "host.txt", "steps.txt", "test.json", "fa3_probe.json",
                     "ninja_log.txt", "wheels.sha256"):
            path = t / "raw" / name
            if not (path.is_file() and path.stat().st_size):
                path = found.get(name, path)
            if path.is_file() and path.stat().st_size:
                dst.add(path, f"{label}/{name}")
        with tarfile.open(logs) as src:
            src.extractall(t / "logs", filter="data")
        for path in sorted((t / "logs").glob("run-*/out/*")):
            if path.suffix == ".xml":
                tree = ET.parse(path)
                for case in tree.getroot().iter("testcase"):
                    for child in case:
                        if child.get("message") != runner.COLLECTION_SKIPPED:  # a module skip's text is its reason
                            child.text = None  # tracebacks quote upstream lines; the message attribute stays
                data = ET.tostring(tree.getroot())
            elif path.suffix == ".log":
                kept = [ln.split("  ")[0].rstrip() for ln in path.read_text(errors="replace").splitlines()
                        if _RESULT.match(ln.strip())]
                data = ("\n".join(kept) + "\n").encode()
            else:
                continue
            info = tarfile.TarInfo(f"{label}/out/{path.name}")
            info.size = len(data)
            dst.addfile(info, io.BytesIO(data))


def _members(tar: tarfile.TarFile) -> dict[str, bytes]:
    return {m.name: f.read() for m in tar.getmembers() if m.isfile() and (f := tar.extractfile(m)) is not None}


def _results(files: dict[str, bytes], label: str) -> tuple[list[runner.FileResult], list[str]]:
    """Each test file's result: from the run's own record where it finished, else its JUnit XML, else its log."""
    record = files.get(f"{label}/test.json")
    if record:
        results = [runner.FileResult(**r) for r in json.loads(record)["results"]]
        for result in results:  # a record from before failure messages were kept: its JUnit XML has them
            xml = files.get(f"{label}/out/{result.file.replace('/', '__')}.xml")
            if result.failed and not result.failures and xml is not None:
                result.failures = _read_junit(xml, runner.FileResult(result.file)).failures
        return results, []
    results, unfinished = [], []
    stems = sorted({Path(n).name.rsplit(".", 2)[0] for n in files if n.startswith(f"{label}/out/")})
    for stem in stems:
        result = runner.FileResult(stem.replace("__", "/") + ".py")
        xml = files.get(f"{label}/out/{stem}.py.xml")
        if xml is not None:
            _read_junit(xml, result)
            result.status = _status(ET.fromstring(xml), result)
        else:
            runner._from_log(files.get(f"{label}/out/{stem}.py.log", b"").decode(), result)
            result.status = "unfinished"
            unfinished.append(result.file)
        results.append(result)
    return results, unfinished


def _read_junit(xml: bytes, result: runner.FileResult) -> runner.FileResult:
    """The runner's own JUnit reading (counts, failures with their messages) of a packed XML."""
    with tempfile.NamedTemporaryFile(suffix=".xml") as fh:
        fh.write(xml)
        fh.flush()
        runner._junit(Path(fh.name), result)
    return result


def _status(root: ET.Element, result: runner.FileResult) -> str:
    """What the runner would have said, from the XML alone (the exit code is not in it)."""
    suite = root if root.tag == "testsuite" else next(root.iter("testsuite"))
    result.seconds = round(float(suite.get("time") or 0), 1)
    messages = [child.get("message") or "" for case in root.iter("testcase") for child in case if child.tag == "error"]
    if not result.passed and messages and all("collection failure" in m for m in messages):
        return "uncollectable"
    if result.failed:
        return "failed"
    skips = [child.get("message") for case in root.iter("testcase") for child in case if child.tag == "skipped"]
    if not result.passed and all(m == runner.COLLECTION_SKIPPED for m in skips):
        return "empty"
    return "passed"


def _fa3_units(ninja_log: bytes | None) -> dict[str, Any] | None:
    """The FA3 instantiation units the build compiled, with their compile seconds (ninja's log)."""
    if not ninja_log:
        return None
    times = {}
    for line in ninja_log.decode(errors="replace").splitlines():
        cols = line.split("\t")
        if len(cols) >= 4 and "instantiations/flash_fwd" in cols[3]:
            times[cols[3].rsplit("/", 1)[-1].removesuffix(".o")] = (int(cols[1]) - int(cols[0])) / 1000
    return {"count": len(times), "seconds": dict(sorted(times.items()))} if times else {"count": 0}


def report(tarballs: list[Path], out: Path) -> dict[str, Any]:
    runs: dict[str, Any] = {}
    for path in tarballs:
        with tarfile.open(path) as tar:
            files = _members(tar)
        label = next(iter(files)).split("/")[0]
        recipe = RECIPES.get(label, "nightly-cu130-pruned")
        exps = [*verdict.applicable(load(recipe).test.expect, ["9.0a"]), *RUN_CONDITIONS.get(label, ())]
        build = json.loads(files[f"{label}/build.json"])
        verify = json.loads(files[f"{label}/verify.json"])
        prov = build["provenance"]
        results, unfinished = _results(files, label)
        rows = []
        for r in results:
            v = verdict.judge(r, exps) if r.status != "unfinished" else None
            rows.append({"file": r.file, "status": r.status, "passed": r.passed, "failed": len(r.failed),
                         "skipped": len(r.skipped), "seconds": r.seconds, "signal": r.signal, "last_test": r.last_test,
                         "red": v.red if v else None, "verdict": v.line if v else
                         f"unfinished when the device time ran out: {r.passed} passed, {len(r.failed)} failed so far",
                         "explained": sorted({e["reason"] for e in v.expected}) if v else [],
                         "unexplained_skips": len(v.unexplained_skips) if v else None,
                         "expected_failures": sum(1 for e in v.expected if e["outcome"] == "fail") if v else 0})
        runs[label] = {
            "recipe": recipe, "series": prov["patch_series"], "wheel": Path(build["wheel"]).name, "host": files.get(f"{label}/host.txt",
                                                                                               b"").decode().strip(),
            "build_seconds": prov["seconds"], "compiler_cpu_seconds": prov["cpu_seconds"], "jobs": prov["jobs"],
            "oom_kills": prov["oom_kills"], "host_compiler": (prov.get("host_compiler") or {}).get("chosen"),
            "host_compiler_why": (prov.get("host_compiler") or {}).get("why"),
            "verify_passed": verify.get("passed"), "verify_failures": verify.get("failures"),
            "files": len(rows), "unfinished": unfinished,
            "red": [r["file"] for r in rows if r["red"]],
            "crashed": [r["file"] for r in rows if r["status"] == "crashed"],
            "collection_errors": [r["file"] for r in rows if r["status"] == "uncollectable"],
            "tests_passed": sum(r["passed"] for r in rows), "tests_failed": sum(r["failed"] for r in rows
                                                                               if r["status"] != "uncollectable"),
            "tests_skipped": sum(r["skipped"] for r in rows),
            "unexplained_skips": sum(r["unexplained_skips"] or 0 for r in rows),
            "expected_failures": sum(row["expected_failures"] for row in rows),
            "fa3": (prov.get("defines") or {}).get("SGL_KERNEL_FA3_HDIMS", "all" if label == "v8" else "off"),
            "fa3_units": _fa3_units(files.get(f"{label}/ninja_log.txt")),
            "test_seconds": _test_seconds(files.get(f"{label}/steps.txt")),
            "wheel_sha256": (files.get(f"{label}/wheels.sha256") or b"").decode().split(" ")[0] or None,
            "fa3_probe": json.loads(files[f"{label}/fa3_probe.json"]) if f"{label}/fa3_probe.json" in files else None,
            "rows": rows,
        }
    issues = sorted({ISSUES.get(label, 42) for label in runs})
    data = {"issue": issues[0] if len(issues) == 1 else issues,
            "recipe": "; ".join(DESCRIPTIONS[label] for label in runs if label in DESCRIPTIONS) or ISSUE_42,
            "run_conditions": {label: [{"pattern": e.pattern, "outcome": e.outcome, "reason": e.reason,
                                        "evidence": e.evidence} for e in conds]
                               for label, conds in RUN_CONDITIONS.items()},
            "runs": runs}
    if "v6" in runs and "v7" in runs:
        a = {r["file"]: r for r in runs["v6"]["rows"]}
        b = {r["file"]: r for r in runs["v7"]["rows"]}
        data["v6_vs_v7"] = {
            "same_verdict": sorted(f for f in a if f in b and _outcome(a[f]) == _outcome(b[f])),
            "different": {f: {"v6": a[f]["verdict"], "v7": b[f]["verdict"]} for f in a if f in b and
                          (a[f]["status"], a[f]["passed"], a[f]["failed"]) != (b[f]["status"], b[f]["passed"],
                                                                               b[f]["failed"])},
        }
    if "v7" in runs and "v7u" in runs:
        data["pruned_vs_unpruned"] = pruned_vs_unpruned(runs["v7"]["rows"], runs["v7u"]["rows"],
                                                        runs.get("v8", {}).get("rows", []))
        walls = {label: runs[label]["test_seconds"] for label in ("v7u", "v8") if label in runs}
        for diff in data["pruned_vs_unpruned"]["different"].values():
            if "why" in diff:
                diff["why"] += f" (the whole test step: {', '.join(f'{k} {v} s' for k, v in walls.items())})"
    out.write_text(json.dumps(data, indent=1) + "\n")
    return data


def _test_seconds(steps: bytes | None) -> int | None:
    """The test step's wall seconds from a run's steps.txt (`verify rc=0 442 s`, then `test rc=11 776 s`; or, from
    bench/gpu_host/pair_and_tests.sh, `1010 s: test start`, then `1400 s: test rc=0`)."""
    text = (steps or b"").decode()
    # bench/upstream_tests/run_on_gpu_host.sh: `12 s: setup`, then `290 s: test rc=0`.
    shipped = re.findall(r"^(\d+) s: (setup|test rc=\d+)$", text, re.M)
    if [step.split(" ")[0] for _, step in shipped] == ["setup", "test"]:
        return int(shipped[1][0]) - int(shipped[0][0])
    started = re.findall(r"^(\d+) s: test start$", text, re.M)
    ended = re.findall(r"^(\d+) s: test rc=\d+$", text, re.M)
    if len(started) == 1 and len(ended) == 1:
        return int(ended[0]) - int(started[0])
    marks = re.findall(r"^(verify|test) rc=\d+ (\d+) s$", text, re.M)
    # One verify then one test on one clock; v6's record has a second, separately timed test call: no figure.
    if [step for step, _ in marks] != ["verify", "test"]:
        return None
    return int(marks[1][1]) - int(marks[0][1])


def _outcome(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["status"], row["passed"], row["failed"], row["skipped"]


def pruned_vs_unpruned(pruned: list[dict[str, Any]], unpruned: list[dict[str, Any]],
                       stand_in: list[dict[str, Any]]) -> dict[str, Any]:
    """File by file, the pruned v7 wheel against the unpruned one (FA3 off in both). Where v7 did not finish a
    file, v8's run of it stands in: v8 = v7 + 0010, which changes only FA3's units, and FA3 is off in this pair,
    so only files that call no FA3 may stand in (test_flash_attention never does)."""
    a = {r["file"]: r for r in pruned}
    later = {r["file"]: r for r in stand_in if "flash_attention" not in r["file"]}
    same, stood_in, different = [], {}, {}
    for row in unpruned:
        f = row["file"]
        ref = a.get(f)
        if ref is not None and ref["status"] == "unfinished" and f in later:
            stood_in[f] = "v8"
            ref = later[f]
        if ref is not None and _outcome(ref) == _outcome(row):
            same.append(f)
        else:
            different[f] = {"pruned": ref and ref["verdict"], "unpruned": row["verdict"],
                            "pruned_from": stood_in.get(f, "v7")}
            if ref and row["status"] == "timeout" and not row["failed"] and not ref["failed"]:
                different[f]["why"] = (f"cut by the per-file time limit ({row['seconds']:.0f} s) with nothing failed: "
                                       f"{row['passed']} of the pruned run's {ref['passed']} passed (it took "
                                       f"{ref['seconds']:.0f} s there), the last one still running: {UNPRUNED_LOAD}")
    return {"pruned": "v7 (sm120/v7, FA3 off)", "unpruned": "v7u (sm120/v7-unpruned, FA3 off)",
            "files": len(unpruned), "same_verdict": len(same), "stood_in_by_v8": stood_in, "different": different}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("label")
    p.add_argument("raw", type=Path)
    p.add_argument("logs", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--build", type=Path, help="the raw pack of the build that made the wheel (bench/arch_builds/build_one.sh)")
    r = sub.add_parser("report")
    r.add_argument("tarballs", type=Path, nargs="+")
    r.add_argument("--out", type=Path, default=ROOT / "bench/upstream_tests/results/upstream-tests.json")
    args = parser.parse_args()
    if args.cmd == "pack":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        pack(args.label, args.raw, args.logs, args.out, args.build)
        return
    data = report(args.tarballs, args.out)
    for label, run in data["runs"].items():
        print(f"{label}: {run['files']} files, {run['tests_passed']} passed, {run['tests_failed']} failed, "
              f"{run['tests_skipped']} skipped; red {run['red']}; unfinished {run['unfinished']}")


if __name__ == "__main__":
    main()
