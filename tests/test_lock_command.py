"""A toolchain that stays installable (issue 66 item 1): `build-kernel lock`, `plan` exiting 3 with the fix first
when the toolchain cannot be installed, a release from pip's index, and index URLs mapped by the user config.

PyTorch's index is not reachable from here, so each index is a local PEP 503 folder (tests/test_wheel_pins.py's
LocalIndex: small real wheels named torch) that lists only the versions a test says, read by pip and by the
tool as file://; a version is "dropped" by listing only newer nightlies while its file stays. Nothing is mocked:
pip resolves (`--dry-run --report`), downloads and checks hashes; the CLI runs as a subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from build_kernel import recipe
from build_kernel.errors import BuildError
from build_kernel.mirrors import CONFIG_ENV, PYPI
from build_kernel.plan import resolve
from build_kernel.stages.builder import wheelpins
from tests.conftest import REPO_ROOT, demo_recipe_text, run_cli, write_recipe
from tests.test_wheel_pins import NEWER, NIGHTLY, OLD, RELEASE, LocalIndex, pinned

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PUBLIC = "https://torch-index.example.invalid/whl/nightly"  # never resolved: only its mirror is read


@pytest.fixture
def index(tmp_path: Path) -> LocalIndex:
    made = LocalIndex(tmp_path / "index")
    made.publish(RELEASE, OLD, NIGHTLY)
    return made


def cli(cache: Path, *args: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {CONFIG_ENV: str(config)} if config else {CONFIG_ENV: str(cache.parent / "no-config.toml")}
    return run_cli("--cache-dir", str(cache), *args, env=env)


def mirror_config(path: Path, rules: dict[str, str]) -> Path:
    path.write_text("[mirrors]\n" + "".join(f"{json.dumps(k)} = {json.dumps(v)}\n" for k, v in rules.items()))
    return path


def one_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == code and len(lines) == 1 and lines[0].startswith("error: "), proc.stdout + proc.stderr
    return lines[0]


def test_lock_resolves_nightly_keeps_it_and_upgrade_moves_it(project: Path, index: LocalIndex, tmp_path: Path) -> None:
    path, cache = pinned(project, "nightly", index.url), tmp_path / "cache"
    lock = path.with_suffix(".lock")
    dry = cli(cache, "lock", "--recipe", str(path), "--dry-run")
    assert dry.returncode == 0 and f"[toolchain.torch] torch nightly: {NIGHTLY} (" in dry.stdout, dry.stderr
    assert "dry run: 1 pin(s) would change" in dry.stdout and not lock.exists()
    done = cli(cache, "lock", "--recipe", str(path), "--json")
    data = json.loads(done.stdout)
    assert done.returncode == 0 and data["written"] and data["pins"][0]["action"] == "added", done.stderr
    locked = tomllib.loads(lock.read_text())["toolchain"]["torch"]
    assert locked["version"] == NIGHTLY and locked["pin"] == "nightly"
    [(target, file)] = locked["wheel"].items()
    assert target == wheelpins.target() and file["sha256"] == hashlib.sha256(index.wheel(NIGHTLY).read_bytes()).hexdigest()
    assert file["url"] == f"{index.files.as_uri()}/{quote(index.wheel(NIGHTLY).name)}"
    text = lock.read_text()

    index.publish(RELEASE, NEWER)  # a newer nightly; NIGHTLY dropped from the listing, its file kept
    kept = cli(cache, "lock", "--recipe", str(path))
    assert kept.returncode == 0 and "(kept; --upgrade resolves it again)" in kept.stdout and "up to date" in kept.stdout
    assert lock.read_text() == text
    plan = cli(cache, "plan", "--recipe", str(path))  # the lock still installs it: not a problem
    assert plan.returncode == 0 and f"torch nightly = {NIGHTLY}: no longer listed" in plan.stdout, plan.stderr
    assert "the lock holds its file" in plan.stdout and not plan.stdout.startswith("problem")
    dry = cli(cache, "lock", "--recipe", str(path), "--upgrade", "--dry-run", "--json")
    row = json.loads(dry.stdout)["pins"][0]
    assert row["action"] == "updated" and row["line"].startswith(f"[toolchain.torch] torch nightly: {NIGHTLY} (")
    assert f"-> {NEWER} (" in row["line"] and lock.read_text() == text  # --json and text: the same line
    moved = cli(cache, "lock", "--recipe", str(path), "--upgrade")
    assert moved.returncode == 0 and row["line"] in moved.stdout, moved.stderr
    assert tomllib.loads(lock.read_text())["toolchain"]["torch"]["version"] == NEWER


def test_a_dropped_pin_without_a_lock_is_said_first_and_lock_refuses_in_one_line(project: Path, index: LocalIndex,
                                                                                 tmp_path: Path) -> None:
    """The seed's case: an exact nightly the index no longer lists, and no lock."""
    path, cache = pinned(project, NIGHTLY, index.url), tmp_path / "cache"
    index.publish(RELEASE, NEWER)
    plan = cli(cache, "plan", "--recipe", str(path), "--json")
    data = json.loads(plan.stdout)
    assert plan.returncode == 3 and len(data["toolchain_problems"]) == 1, plan.stderr
    assert f"no longer listed on {index.url}; nearest: {RELEASE}, {NEWER}" in data["toolchain_problems"][0]
    line = one_error(cli(cache, "lock", "--recipe", str(path)), 3)
    assert f"torch {NIGHTLY} is not listed on {index.url}" in line and "holds no file of it" in line
    assert "nothing written" in line and f"put the lock of someone who built this recipe at {path.with_suffix('.lock')}" in line
    assert not path.with_suffix(".lock").exists()
    # Someone who has it hands over their lock (here: made while the index still listed it): plan is green.
    index.publish(RELEASE, NIGHTLY)
    assert cli(cache, "lock", "--recipe", str(path)).returncode == 0
    index.publish(RELEASE, NEWER)
    plan = cli(cache, "plan", "--recipe", str(path))
    assert plan.returncode == 0 and "no longer listed" in plan.stdout and "reinstalls use it" in plan.stdout


def test_an_unreachable_index_without_a_lock(project: Path, tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on: connection refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path, cache = pinned(project, NIGHTLY, f"http://127.0.0.1:{port}/simple"), tmp_path / "cache"
    plan = cli(cache, "plan", "--recipe", str(path))
    first = plan.stdout.splitlines()[0]
    assert plan.returncode == 3 and first.startswith("problem") and "unreachable" in first and "fix: " in first
    line = one_error(cli(cache, "lock", "--recipe", str(path)), 3)
    assert f"127.0.0.1:{port}" in line and "unreachable" in line and "; not locked (put the lock of someone" in line
    assert not path.with_suffix(".lock").exists()
    assert "drop --offline" in cli(cache, "--offline", "lock", "--recipe", str(path)).stderr


def test_the_seed_recipe_through_a_mirror_that_dropped_its_nightly(index: LocalIndex, tmp_path: Path) -> None:
    """nightly-cu130-seed as shipped, its index mapped to a local one that lists only newer nightlies: exit 3,
    the problem first, naming the three ways out (a lock, a mirror, the default recipe)."""
    index.publish(RELEASE, NEWER)
    seed = recipe.load("nightly-cu130-seed")
    assert seed.toolchain.torch == NIGHTLY and seed.source.commit == recipe.load("nightly-cu130").source.commit
    config = mirror_config(tmp_path / "config.toml", {seed.toolchain.torch_index: index.url})
    plan = cli(tmp_path / "cache", "plan", "--recipe", "nightly-cu130-seed", config=config)
    first = plan.stdout.splitlines()[0]
    assert plan.returncode == 3 and first.startswith("problem  ") and f"torch {NIGHTLY}: no longer listed" in first
    assert f"{index.url} (mirror of {seed.toolchain.torch_index})" in first
    assert f"at {REPO_ROOT / 'recipes' / 'nightly-cu130-seed.lock'}" in first
    assert f"[mirrors] of the user config {config}" in first and "build the default recipe nightly-cu130" in first


def test_the_default_recipe_takes_a_release_from_pips_index() -> None:
    r = recipe.load("nightly-cu130")
    assert (r.toolchain.torch, r.toolchain.torch_index, r.toolchain.cuda) == ("2.14.1", "", "13.0")
    for name in ("nightly-cu130-pruned", "nightly-cu130-unpruned", "sgl-kernel-0.3.21"):
        assert (recipe.load(name).toolchain.torch, recipe.load(name).toolchain.torch_index) == ("2.14.1", "")


@pytest.mark.network
def test_the_default_recipe_plans_green_against_pypi() -> None:
    proc = run_cli("plan", "--recipe", "nightly-cu130")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"torch 2.14.1: a release listed on pip's index {PYPI}" in proc.stdout


def test_a_release_from_pips_index_is_checked_on_its_mirror(project: Path, tmp_path: Path) -> None:
    """torch without torch_index: pip's index (here PyPI mapped to a local folder by the user config)."""
    mirror = LocalIndex(tmp_path / "pypi")
    mirror.publish("2.13.0", "2.15.0")
    config = mirror_config(tmp_path / "config.toml", {PYPI: mirror.url + "/"})
    path, cache = write_recipe(project, "rel", demo_recipe_text().replace('torch = "existing"', 'torch = "2.14.1"')), \
        tmp_path / "cache"
    (project / "patches" / "minikernel").symlink_to(REPO_ROOT / "patches" / "minikernel")
    plan = cli(cache, "plan", "--recipe", str(path), config=config)
    first = plan.stdout.splitlines()[0]
    assert plan.returncode == 3 and first.startswith("problem"), plan.stdout + plan.stderr
    assert f"torch 2.14.1: not listed on pip's index {mirror.url}/; nearest: 2.13.0, 2.15.0" in first
    mirror.publish("2.13.0", "2.14.1", "2.15.0")
    plan = cli(cache, "plan", "--recipe", str(path), config=config)
    assert plan.returncode == 0 and f"a release listed on pip's index {mirror.url}/" in plan.stdout, plan.stderr
    done = cli(cache, "lock", "--recipe", str(path))
    assert done.returncode == 0 and "not locked (a release from pip's index" in done.stdout, done.stderr
    assert "nothing to lock" in done.stdout
    assert not path.with_suffix(".lock").exists()
    # The build environment's pip reads the same mirror.
    p = resolve(recipe.load(str(path)), env={**os.environ, CONFIG_ENV: str(config)}, cache_dir=cache)
    assert wheelpins.index_args(p) == ["--index-url", mirror.url + "/"]


def test_a_mirrored_torch_index_locks_the_public_url_and_installs_from_the_mirror(project: Path, index: LocalIndex,
                                                                                  tmp_path: Path) -> None:
    root = index.simple.parent.as_uri() + "/"
    config = mirror_config(tmp_path / "config.toml", {"https://torch-index.example.invalid/whl/": root})
    path, cache = pinned(project, "nightly", f"{PUBLIC.rsplit('/', 1)[0]}/simple"), tmp_path / "cache"
    done = cli(cache, "lock", "--recipe", str(path), config=config)
    assert done.returncode == 0, done.stderr
    file = next(iter(tomllib.loads(path.with_suffix(".lock").read_text())["toolchain"]["torch"]["wheel"].values()))
    public = f"https://torch-index.example.invalid/whl/files/{quote(index.wheel(NIGHTLY).name)}"
    assert file["url"] == public  # the committed lock names the public file, never the site's mirror
    plan = cli(cache, "plan", "--recipe", str(path), config=config)
    assert plan.returncode == 0 and f"(mirror of {PUBLIC.rsplit('/', 1)[0]}/simple)" in plan.stdout, plan.stderr
    p = resolve(recipe.load(str(path)), env={**os.environ, CONFIG_ENV: str(config)}, cache_dir=cache)
    found = wheelpins.locked(p, wheelpins.of(p)[0])
    assert found is not None
    requirement = found.requirement("torch", p.mirrors)
    assert requirement.startswith(f"torch @ {index.files.as_uri()}/")
    target = tmp_path / "site"  # real pip: the mirror's file, checked against the locked sha256
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(target), requirement], check=True, capture_output=True)
    assert (target / "torch" / "__init__.py").read_text().count(NIGHTLY) == 2
    index.wheel(NIGHTLY).write_bytes(index.wheel(OLD).read_bytes())  # other bytes at the mirror: refused
    bad = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                          str(tmp_path / "site2"), requirement], capture_output=True, text=True, check=False)
    assert bad.returncode != 0 and "THESE PACKAGES DO NOT MATCH THE HASHES" in bad.stderr


def test_the_compile_cache_error_names_the_user_config_path(tmp_path: Path) -> None:
    from build_kernel.compile_cache import settings

    config = tmp_path / "config.toml"
    with pytest.raises(BuildError) as caught:
        settings.resolve("sccache", "", "sccache-dist", "", {CONFIG_ENV: str(config)})
    assert f"of the user config {config}" in str(caught.value.hint)
