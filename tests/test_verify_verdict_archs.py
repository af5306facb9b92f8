"""A verdict belongs to its archs (issue 66 item 9): a verify for other archs than the wheel's own is kept
apart from the wheel's verdict, and publish names the mismatch with the command that fixes it.

Fast tests: small real wheels carrying a build-kernel provenance (their archs), records written by the
report module itself, and the CLI in a subprocess. The slow test: the session's real 12.0a demo wheel,
a real `verify --arch 10.0a` (which fails: no sm_100a code), then a real publish to a static folder.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from build_kernel.errors import VerifyError
from build_kernel.stages.verify.report import (
    RECORD_SUFFIX,
    Report,
    read_record,
    record_path,
    require_verified,
    reusable,
    sha256_of,
    write_record,
)
from tests.conftest import DemoBuild, run_cli
from tests.test_publish import LOCAL, make_wheel

VERSION = f"0.1.0{LOCAL}"


def built_for(folder: Path, archs: list[str]) -> Path:
    """A real wheel whose provenance says it was built for `archs` (no record beside it)."""
    provenance = json.dumps({"tool": "build-kernel", "recipe": "demo", "archs": archs})
    return make_wheel(folder, "bk-verdict", VERSION, verified=False,
                      extra={f"bk_verdict-{VERSION}.dist-info/build_kernel_provenance.json": provenance})


def report_for(wheel: Path, asked: list[str], *, passed: bool, digest: str = "d") -> Report:
    return Report(wheel.name, sha256_of(wheel), asked, failures=[] if passed else [f"{asked[0]}: no cubin"],
                  checks_digest=digest, checks={"import": True})


def test_a_verify_for_other_archs_is_kept_apart(tmp_path: Path) -> None:
    wheel = built_for(tmp_path, ["12.0a"])
    apart = write_record(wheel, report_for(wheel, ["sm_100a"], passed=False, digest="other"))
    assert apart == tmp_path / f"{wheel.name}.verify.sm_100a.json" and read_record(wheel) is None
    with pytest.raises(VerifyError) as info:
        require_verified(wheel, recipe="demo")
    assert info.value.render() == (
        f"{wheel.name} has not been verified for its own archs (sm_120a): only for other archs "
        f"({wheel.name}.verify.sm_100a.json), which is not its verdict "
        f"(run `build-kernel verify {wheel} --recipe demo --arch 12.0a` (or pass --force to override))")
    own = write_record(wheel, report_for(wheel, ["sm_120a"], passed=True, digest="own"))
    assert own == record_path(wheel) == tmp_path / (wheel.name + RECORD_SUFFIX)
    assert require_verified(wheel)["asked"] == ["sm_120a"]  # the failed verdict for sm_100a is not the wheel's
    # Each record is found again by its checks (whose digest names the archs), the failed one is never reused.
    assert reusable(wheel, "own") is not None and reusable(wheel, "other") is None
    # A wheel that does not say its archs (not ours): its one record is its verdict, as before.
    foreign = make_wheel(tmp_path / "foreign", "bk-foreign", VERSION, verified=False)
    assert write_record(foreign, report_for(foreign, ["sm_100a"], passed=True)).name == foreign.name + RECORD_SUFFIX


def test_a_record_of_other_archs_in_the_verdicts_place_is_named(tmp_path: Path) -> None:
    """A record written before verdicts were kept per archs: publish names the mismatch in one line."""
    wheel = built_for(tmp_path / "w", ["9.0a", "12.0a"])
    data = {**report_for(wheel, ["sm_100a"], passed=False).to_dict(), "passed": False}
    data.pop("from_record")
    (wheel.parent / (wheel.name + RECORD_SUFFIX)).write_text(json.dumps(data))
    env = {"HOME": str(tmp_path), "BUILD_KERNEL_INDEXES": str(tmp_path / "none.toml"),
           "BUILD_KERNEL_CACHE_DIR": str(tmp_path / "cache")}
    proc = run_cli("publish", str(wheel), "--to", str(tmp_path / "shelf"), env=env)
    assert proc.returncode == 7, proc.stdout + proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("error: ")]
    assert line == (f"error: {wheel.name} was verified for sm_100a, but it is built for sm_90a, sm_120a: that verdict "
                    f"is not the wheel's (run `build-kernel verify {wheel} --recipe demo --arch 9.0a,12.0a` "
                    "(or pass --force to override))")
    assert not (tmp_path / "shelf").exists()


@pytest.mark.slow
def test_verify_for_another_arch_leaves_the_demo_wheels_verdict(demo_build: DemoBuild, tmp_path: Path) -> None:
    """The issue's steps on the real 12.0a demo wheel: `verify --arch 10.0a` fails (no sm_100a code) and its
    verdict is kept apart; the wheel's own passing verdict stands, and publish takes the wheel."""
    out = tmp_path / "wheels"
    out.mkdir()
    wheel = Path(shutil.copy2(demo_build.wheel, out))
    shutil.copy2(demo_build.out / (demo_build.wheel.name + RECORD_SUFFIX), out)
    verdict = (out / (wheel.name + RECORD_SUFFIX)).read_bytes()
    env = {"BUILD_KERNEL_CACHE_DIR": str(demo_build.cache), "BUILD_KERNEL_OUTPUT_DIR": str(out)}
    other = run_cli("verify", str(wheel), "--recipe", "demo", "--arch", "10.0a", env=env)
    assert other.returncode == 7, other.stdout + other.stderr
    assert f"its verdict is kept apart in {wheel.name}.verify.sm_100a.json, not the wheel's" in other.stderr
    apart = json.loads((out / f"{wheel.name}.verify.sm_100a.json").read_text())
    assert apart["passed"] is False and apart["asked"] == ["sm_100a"]
    assert (out / (wheel.name + RECORD_SUFFIX)).read_bytes() == verdict
    # The wheel declares the torch it was built against (issue 66 item 2), as pip knows that torch.
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    torch = importlib.metadata.version("torch")
    assert f"Requires-Dist: torch=={torch}" in metadata.splitlines()
    publish = ["--json", "publish", str(wheel), "--recipe", "demo", "--to", str(tmp_path / "shelf")]
    publish_env = {**env, "HOME": str(tmp_path), "BUILD_KERNEL_INDEXES": str(tmp_path / "none.toml")}
    published = run_cli(*publish, env=publish_env)
    assert published.returncode == 0, published.stdout + published.stderr
    [done] = json.loads(published.stdout)["wheels"]
    # The folder holds no torch: the build environment's stands in, and the warning says a fleet needs one.
    assert done["status"] == "copied" and done["dependencies"] == {
        f"torch {torch}": "the build environment (linked in: not on the index)"}
    assert "a fleet installing from this index alone cannot install it" in " ".join(published.stderr.split())
    # And publishing the same bytes again (`make demo` twice) is a success that changes nothing (item 5).
    again = run_cli(*publish, env=publish_env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["wheels"][0]["status"] == "unchanged"
