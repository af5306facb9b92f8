"""`build-kernel nightly` on a real upstream that moves: a real git repository made here (the bundled setuptools
miniature, examples/minicppext, committed night after night), a real patch series in two versions, real builds
for 12.0a (one compile in the module: the fixture runs the whole story once, each test reads its night), verify,
a real static index with install-back. No GPU here: the tests stage is skipped with its line.

The story, one night per step (dates 2026-01-05 ...):
  1. upstream at A, series v1 applies: the night starts building, is killed (its whole process group, as systemd
     stops a unit) while the build runs; meanwhile a second night is refused by the lock, naming the holder;
     the same command then resumes that night and publishes its wheel;
  2. nothing new: a no-op success that says so;
  3. upstream moved 3 commits, the second of which breaks 0001's hunk: no compile, the record names the patch,
     the hunk and that commit (bisected), the index's newest wheel is still night 1's;
  4. upstream took 0002 verbatim (a refreshed series v2 exists: chosen, 0002 reported retired) and broke its own
     build in the same commit: the night fails in the build, and the index's newest and the last good night stay
     night 1's.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import git
import pytest

from tests.conftest import REPO_ROOT, commit_files, run_cli, write_recipe

if TYPE_CHECKING:
    from build_kernel.plan import Plan

SOURCE = REPO_ROOT / "examples" / "minicppext"
README = (SOURCE / "README.md").read_text()
FIRST, LAST = README.splitlines()[0], README.splitlines()[-1]
P_PATCH = ("Description: the nightly's own title\n--- a/README.md\n+++ b/README.md\n@@ -1,3 +1,3 @@\n"
           f"-{FIRST}\n+{FIRST} (nightly)\n \n {README.splitlines()[2]}\n")  # " \n": the empty context line
X_PATCH = f"""\
Description: a closing line that upstream later takes as it is
--- a/README.md
+++ b/README.md
@@ -{len(README.splitlines()) - 1},2 +{len(README.splitlines()) - 1},3 @@
 {README.splitlines()[-2]}
 {LAST}
+Built every night.
"""
# What setup.py does first in the upstream of night 1 (test-only): say it started, then wait for the go-ahead, so
# the test kills the night while its build runs (a barrier, not a sleep).
GATE = """\
import os as _os, pathlib as _pl, time as _t
if _os.environ.get("NIGHTLY_TEST_GATE"):
    _gate = _pl.Path(_os.environ["NIGHTLY_TEST_GATE"])
    (_gate / "started").touch()
    while not (_gate / "go").exists():
        _t.sleep(0.05)
"""


def _files() -> dict[str, str]:
    found = {p.relative_to(SOURCE).as_posix(): p.read_text() for p in SOURCE.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    found["setup.py"] = GATE + found["setup.py"]
    return found


def _series(root: Path, version: str, patches: dict[str, str]) -> None:
    from build_kernel.series import write_lock

    folder = root / "patches" / "minicppext-nightly" / version
    folder.mkdir(parents=True)
    for name, text in patches.items():
        (folder / name).write_text(text)
    (folder / "series").write_text("".join(f"{n}\n" for n in patches))
    write_lock(folder)


class Story:
    def __init__(self, root: Path) -> None:
        self.root, self.upstream, self.index = root / "proj", root / "upstream", root / "index"
        self.state, self.gate = root / "state", root / "gate"
        self.gate.mkdir()
        self.env = {"BUILD_KERNEL_CACHE_DIR": str(root / "cache"), "BUILD_KERNEL_OUTPUT_DIR": str(root / "out"),
                    "XDG_CONFIG_HOME": str(root / "config"), "NIGHTLY_TEST_GATE": str(self.gate)}
        self.commits: dict[str, str] = {}
        self.nights: dict[str, Any] = {}

    @property
    def recipe(self) -> Path:
        return self.root / "recipes" / "nightly-demo.toml"

    def args(self, night: str) -> list[str]:
        return ["nightly", "--recipe", str(self.recipe), "--state-dir", str(self.state), "--night", night, "--json"]

    def night(self, night: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        proc = run_cli(*self.args(night), env=self.env)
        data = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
        return proc, data

    def index_wheels(self) -> list[str]:
        return sorted(p.name for p in self.index.glob("*.whl"))


def _start(story: Story, night: str) -> subprocess.Popen[str]:
    env = {**os.environ, "NO_COLOR": "1", **story.env}
    return subprocess.Popen([sys.executable, "-m", "build_kernel", *story.args(night)], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    """Until `path` exists (the event), or the process ended without making it (then its output says why)."""
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the night ended before its build started:\n{out}\n{err}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Story:
    s = Story(tmp_path_factory.mktemp("nightly"))
    (s.root / "recipes").mkdir(parents=True)
    readme = "README.md"
    files = _files()
    s.commits["A"] = commit_files(s.upstream, files, "A: the miniature")
    repo = git.Repo(s.upstream)
    repo.git.config("uploadpack.allowFilter", "true")
    repo.git.config("uploadpack.allowAnySHA1InWant", "true")
    _series(s.root, "v1", {"0001-title.patch": P_PATCH, "0002-closing-line.patch": X_PATCH})
    text = (REPO_ROOT / "recipes" / "demo-cppext.toml").read_text()
    text = (text.replace('repo = "example:minicppext"', f'repo = "file://{s.upstream}"')
            .replace('commit = "806180d731961fa7ee126d761559c41473c88b66"', f'commit = "{s.commits["A"]}"')
            .replace('ref = "examples/minicppext"', 'ref = "main"')
            .replace('series = "minicppext"', 'series = "minicppext-nightly"'))
    write_recipe(s.root, "nightly-demo", text + f'\n[publish]\ntarget = "{s.index}"\n')

    # Night 1: killed while building, a second night refused meanwhile, then resumed by the same command.
    first = _start(s, "2026-01-05")
    _wait_for(s.gate / "started", first)
    s.nights["busy"] = s.night("2026-01-05")
    holder = json.loads((s.state / "holder.json").read_text())
    os.killpg(first.pid, signal.SIGKILL)  # the whole group, as systemd stops a unit: the build's children too
    first.communicate()
    s.nights["holder"], s.nights["killed_pid"] = holder, first.pid
    s.nights["after_kill"] = json.loads(next((s.state / "nights").glob("20260105-*.json")).read_text())
    (s.gate / "go").touch()
    s.nights["1"] = s.night("2026-01-05")
    s.nights["index_after_1"] = s.index_wheels()

    # Night 2: nothing new.
    s.nights["2"] = s.night("2026-01-06")

    # Night 3: three commits; the second breaks 0001's context.
    s.commits["B1"] = commit_files(s.upstream, {"tests/README.txt": "the tests need torch\n"}, "B1: a note")
    s.commits["B2"] = commit_files(s.upstream, {readme: README.replace(FIRST, f"{FIRST}: a miniature", 1)},
                                   "B2: a longer title")
    s.commits["C"] = commit_files(s.upstream, {"tests/README.txt": "the tests need torch and pytest\n"},
                                  "C: another note")
    s.nights["3"] = s.night("2026-01-07")
    s.nights["index_after_3"] = s.index_wheels()

    # Night 4: upstream took 0002 as it is, and broke its build; v2 carries 0001 refreshed and no 0002.
    moved = README.replace(FIRST, f"{FIRST}: a miniature", 1) + "Built every night.\n"
    broken = 'raise SystemExit("minicppext: this commit does not build")\n' + files["setup.py"]
    s.commits["D"] = commit_files(s.upstream, {readme: moved, "setup.py": broken}, "D: the closing line; a broken build")
    _series(s.root, "v2", {"0001-title.patch": P_PATCH.replace(f"-{FIRST}\n+{FIRST} (nightly)",
                                                                 f"-{FIRST}: a miniature\n+{FIRST} (nightly)")})
    s.nights["4"] = s.night("2026-01-08")
    s.nights["index_after_4"] = s.index_wheels()
    s.nights["report_after_4"] = (s.state / "report.md").read_text()

    # What the next night would do, asked without changing the state folder.
    before = {p: p.stat().st_mtime_ns for p in s.state.rglob("*")}
    s.nights["dry"] = run_cli(*s.args("2026-01-09"), "--dry-run", env=s.env)
    s.nights["dry_unchanged"] = before == {p: p.stat().st_mtime_ns for p in s.state.rglob("*")}

    # Night 5: upstream builds again, but its package no longer imports: built, then verify fails.
    init = "minicppext/__init__.py"
    s.commits["E"] = commit_files(s.upstream, {"setup.py": files["setup.py"],
                                               init: 'raise ImportError("minicppext: this commit does not import")\n'
                                               + files[init]}, "E: builds again, does not import")
    s.nights["5"] = s.night("2026-01-09")
    s.nights["index_after_5"] = s.index_wheels()
    return s


def _ok(result: tuple[subprocess.CompletedProcess[str], dict[str, Any]]) -> dict[str, Any]:
    proc, data = result
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return data


@pytest.mark.slow
def test_a_second_night_at_once_is_refused_naming_the_holder(story: Story) -> None:
    proc, _ = story.nights["busy"]
    assert proc.returncode == 75
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    holder = story.nights["holder"]
    assert f"another night of nightly-demo is running: pid {holder['pid']} on {holder['host']}" in line
    assert holder["pid"] == story.nights["killed_pid"]


@pytest.mark.slow
def test_a_killed_night_leaves_an_interrupted_record_and_the_same_command_resumes_it(story: Story) -> None:
    from build_kernel.nightly import record

    killed = story.nights["after_kill"]
    assert record.check(killed) == []
    assert killed["outcome"] == "interrupted" and killed["finished"] is None
    data = _ok(story.nights["1"])
    assert record.check(data) == [] and data["outcome"] == "built" and data["resumed"] == 1
    assert data["upstream"] == {**data["upstream"], "commit": story.commits["A"], "previous_good": None}
    assert data["series"] == {**data["series"], "name": "minicppext-nightly/v1", "version": "v1", "retired": [],
                              "conflict": None}
    wheel = data["wheel"]
    assert wheel["version"].startswith("0.1.0.dev20260105+cu130.")
    assert wheel["published_to"] and story.nights["index_after_1"] == [wheel["name"]]
    assert data["build"]["archs"] == ["12.0a"] and data["build"]["wall_s"] > 0
    assert data["tests"]["ran"] is False and "no GPU on this host" in data["tests"]["why_not"]
    assert Path(data["logs"]["build"]).is_file() and Path(data["logs"]["night"]).is_file()
    assert "resuming the night of 2026-01-05" in Path(data["logs"]["night"]).read_text()
    assert not (story.state / "current.json").exists() and not (story.state / "holder.json").exists()


@pytest.mark.slow
def test_nothing_new_is_a_no_op_success_that_says_so(story: Story) -> None:
    data = _ok(story.nights["2"])
    assert data["outcome"] == "unchanged" and data["build"] is None and data["wheel"] is None
    assert data["newest_wheel"] == story.nights["1"][1]["wheel"]["name"]
    assert "nothing new since the last good night (2026-01-05)" in data["reason"]
    assert data["report"]["headline"].startswith("nightly-demo 2026-01-06: no new wheel, unchanged")


@pytest.mark.slow
def test_a_conflict_names_the_hunk_and_the_first_bad_commit_and_keeps_the_index(story: Story) -> None:
    proc, data = story.nights["3"]
    assert proc.returncode == 5, proc.stderr[-2000:]
    assert data["outcome"] == "conflict" and data["build"] is None and data["wheel"] is None
    assert data["upstream"]["commits_since"] == 3 and data["upstream"]["previous_good"] == story.commits["A"]
    conflict = data["series"]["conflict"]
    assert conflict["patch"] == "0001-title.patch"
    assert conflict["hunk"].startswith("README.md hunk #1 (line 1): expected '# minicppext'")
    assert conflict["first_bad_commit"] == story.commits["B2"]
    assert story.nights["index_after_3"] == story.nights["index_after_1"]  # the newest is still night 1's


@pytest.mark.slow
def test_a_retired_patch_and_a_failed_night_that_replaces_nothing(story: Story) -> None:
    proc, data = story.nights["4"]
    assert proc.returncode == 6, proc.stderr[-2000:]  # the build's own exit code
    assert data["outcome"] == "failed" and data["wheel"] is None and data["finished"]
    assert "BuildError" in data["reason"] and "the last good wheel stays the newest" in data["reason"]
    assert data["series"] == {**data["series"], "name": "minicppext-nightly/v2", "version": "v2",
                              "retired": ["0002-closing-line.patch"], "conflict": None}
    assert Path(data["logs"]["build"]).is_file()
    assert story.nights["index_after_4"] == story.nights["index_after_1"]
    good = json.loads((story.state / "last_good.json").read_text())
    assert good["commit"] == story.commits["A"] and good["wheel"] == story.nights["1"][1]["wheel"]
    report = story.nights["report_after_4"].splitlines()
    first = story.nights["1"][1]["wheel"]["name"]
    assert report[0] == f"# nightly-demo 2026-01-08: no new wheel, failed (newest stays {first})"
    assert report[2].startswith("**Why:** BuildError: ")
    assert "retired (upstream has them): 0002-closing-line.patch" in report[4]
    # Every record the story left keeps the contract, one per night.
    from build_kernel.nightly import record

    names = sorted(p.name[:8] for p in (story.state / "nights").glob("*.json"))
    assert names == ["20260105", "20260106", "20260107", "20260108", "20260109"]
    assert [r["outcome"] for r in record.read_all(story.state)] == ["built", "unchanged", "conflict", "failed",
                                                                     "failed"]


@pytest.mark.slow
def test_a_night_that_built_and_failed_verify_keeps_its_build_and_replaces_nothing(story: Story) -> None:
    """The 0.4 nights of the real replay: the wheel built (46 minutes on 2 cores) and verify refused it. The record
    keeps what the compile cost; the index's newest stays the last good night's."""
    proc, data = story.nights["5"]
    assert proc.returncode == 7, proc.stderr[-2000:]  # verify's exit code
    assert data["outcome"] == "failed" and data["wheel"] is None
    assert data["reason"].startswith("VerifyError: ") and "the last good wheel stays the newest" in data["reason"]
    assert data["build"]["archs"] == ["12.0a"] and data["build"]["wall_s"] > 0
    assert story.nights["index_after_5"] == story.nights["index_after_1"]


@pytest.mark.slow
def test_a_dry_run_says_what_the_next_night_would_do_and_writes_nothing(story: Story) -> None:
    proc = story.nights["dry"]
    assert proc.returncode == 0, proc.stderr
    said = json.loads(proc.stdout)
    assert said["would"] == "build 12.0a with series minicppext-nightly/v2, verify, publish"
    assert said["upstream"]["commit"] == story.commits["D"] and said["upstream"]["commits_since"] == 4
    assert said["series"]["retired"] == ["0002-closing-line.patch"]
    assert story.nights["dry_unchanged"]


def test_retention_keeps_the_newest_the_last_good_and_what_a_lock_or_recipe_names(tmp_path: Path,
                                                                                   project: Path) -> None:
    """Five good nights' wheels in a real state folder and static index; keep 2: the three older go, except the one
    a lock names by its version (a fleet pins it), and the index's pages follow."""
    from build_kernel import recipe as recipes
    from build_kernel.nightly import record, retention, state
    from build_kernel.plan import resolve
    from build_kernel.stages.publish import resolve_target
    from build_kernel.stages.publish.backends import StaticDirBackend

    index, folder = tmp_path / "index", tmp_path / "state"
    (project / "patches" / "minicppext" / "v1").mkdir(parents=True)
    (project / "patches" / "minicppext" / "v1" / "series").write_text("")
    (project / "patches" / "minicppext" / "v1" / "series.lock").write_text("")
    path = write_recipe(project, "kept", (REPO_ROOT / "recipes" / "demo-cppext.toml").read_text()
                        + f'\n[publish]\ntarget = "{index}"\n')
    plan = resolve(recipes.load(str(path)), env={"HOME": str(tmp_path)}, cache_dir=tmp_path / "cache")
    backend = StaticDirBackend(resolve_target(None, plan.recipe.publish, env={"HOME": str(tmp_path)}))
    names = []
    for day in range(1, 6):
        version = f"0.1.0.dev2026010{day}+cu130.sm120a"
        name = f"minicppext-{version}-cp311-cp311-linux_x86_64.whl"
        names.append(name)
        wheel = state.wheels_dir(folder) / name
        wheel.parent.mkdir(parents=True, exist_ok=True)
        wheel.write_bytes(b"not really a wheel, a file to keep or remove")
        backend.put(wheel, version, skip_existing=False)
        commit = f"{day:040d}"
        record.write(folder, {"schema": 1, "recipe": "kept", "night": f"2026-01-0{day}", "started": "x", "finished": "y",
                              "outcome": "built", "reason": "built", "upstream": {"ref": "main", "commit": commit,
                                                                                   "previous_good": None,
                                                                                   "commits_since": 0},
                              "series": {"name": None, "version": None, "retired": [], "conflict": None},
                              "lock_changes": [], "build": None, "tests": {"ran": False, "why_not": "x", "per_file": {}},
                              "wheel": {"name": name, "version": version, "sha256": "0" * 64, "published_to": None},
                              "logs": {}})
    state.set_last_good(folder, {"night": "2026-01-05", "commit": f"{5:040d}", "wheel": {"name": names[-1]}})
    path.with_suffix(".lock").write_text('# a fleet pins night 2\n[pinned]\nversion = "0.1.0.dev20260102+cu130.sm120a"\n')
    said: list[str] = []
    kept = retention.apply(folder, plan, 2, to=None, say=said.append)
    assert kept["removed"] == [names[2], names[0]]
    assert kept["kept_named"] == {names[1]: str(path.with_suffix(".lock"))}
    assert sorted(p.name for p in state.wheels_dir(folder).iterdir()) == sorted(names[1:2] + names[3:])
    assert sorted(p.name for p in index.glob("*.whl")) == sorted(names[1:2] + names[3:])
    page = (index / "simple" / "minicppext" / "index.html").read_text()
    assert names[0] not in page and names[1] in page


def test_the_record_check_names_each_departure() -> None:
    from build_kernel.nightly import record

    assert record.check([]) == ["a record is a JSON object, not list"]
    bad = {"schema": 1, "recipe": "r", "night": "2026-1-5", "started": "x", "finished": None, "outcome": "done",
           "reason": "", "upstream": {"ref": "main", "commit": "abc", "previous_good": None, "commits_since": True},
           "series": {"name": None, "version": None, "retired": [1], "conflict": None}, "lock_changes": [],
           "build": None, "tests": {"ran": False, "why_not": None, "per_file": {"t.py": {"passed": 1}}},
           "wheel": None}
    assert record.check(bad) == ["upstream.commits_since: bool where int is expected", "series.retired[0]: int where "
                                 "str is expected", "tests.per_file.t.py.failed: missing",
                                 "tests.per_file.t.py.skipped: missing", "logs: missing"]


def test_a_tag_pattern_follows_the_newest_release(tmp_path: Path) -> None:
    """`--upstream 'v0.4.*'`: the newest matching tag by PEP 440 (v0.4.10 after v0.4.9), read by `git ls-remote`."""
    from build_kernel import recipe as recipes
    from build_kernel.errors import FetchError
    from build_kernel.nightly import upstream
    from build_kernel.plan import resolve

    repo_dir = tmp_path / "tags"
    for tag in ("v0.4.9", "v0.4.10", "v0.4.2", "v0.5.0", "v0.4.x"):
        commit_files(repo_dir, {"VERSION": tag}, tag)
        git.Repo(repo_dir).create_tag(tag)
    plan = resolve(recipes.load("demo-cppext"), env={"PATH": os.environ["PATH"]}, cache_dir=tmp_path / "cache")
    assert upstream.newest_tag(plan, "v0.4.*", str(repo_dir)) == "v0.4.10"
    with pytest.raises(FetchError, match=r"no tag of .* matches 'v9\.\*' \(5 tag\(s\) there\)"):
        upstream.newest_tag(plan, "v9.*", str(repo_dir))


def test_a_tag_pattern_is_listed_through_the_users_mirror(tmp_path: Path) -> None:
    """The recipe's public URL is not reachable (a build farm behind a mirror): the tags are listed where the user's
    [mirrors] sends every fetch of it."""
    from build_kernel import recipe as recipes
    from build_kernel.nightly import upstream
    from build_kernel.plan import resolve

    mirror = tmp_path / "mirror" / "upstream.git"
    for tag in ("v0.4.1", "v0.4.3"):
        commit_files(mirror, {"VERSION": tag}, tag)
        git.Repo(mirror).create_tag(tag)
    config = tmp_path / "config.toml"
    config.write_text(f'[mirrors]\n"https://example.invalid/" = "{(tmp_path / "mirror").as_uri()}/"\n')
    plan = resolve(recipes.load("demo-cppext"), env={"PATH": os.environ["PATH"], "BUILD_KERNEL_CONFIG": str(config)},
                   cache_dir=tmp_path / "cache")
    assert upstream.newest_tag(plan, "v0.4.*", "https://example.invalid/upstream.git") == "v0.4.3"


def test_a_tag_server_that_never_answers_is_a_timeout_not_a_hang(tmp_path: Path) -> None:
    """`git ls-remote` of a tag pattern under the network's fetch timeout: a real `git://` socket that accepts and
    never answers (the kernel's backlog accepts; nothing reads or writes) fails the night in 1 s with the fix."""
    from build_kernel import recipe as recipes
    from build_kernel.errors import FetchError
    from build_kernel.nightly import upstream
    from build_kernel.plan import resolve

    plan = resolve(recipes.load("demo-cppext"), env={"PATH": os.environ["PATH"], "BUILD_KERNEL_FETCH_TIMEOUT": "1"},
                   cache_dir=tmp_path / "cache")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"git://127.0.0.1:{silent.getsockname()[1]}/upstream.git"
        started = time.monotonic()
        with pytest.raises(FetchError, match=r"listing the tags of git://.*did not finish in 1 s") as caught:
            upstream.newest_tag(plan, "v0.4.*", url)
        assert time.monotonic() - started < 10
    assert "raise BUILD_KERNEL_FETCH_TIMEOUT" in (caught.value.hint or "")


def _two_versions(tmp_path: Path, pinned: str, omitted: str = "") -> tuple[Plan, str, str]:
    """A real upstream (A: the miniature, B: its closing line changed, so 0002 conflicts), series v1 (0001) and v2
    (0001 + 0002), and the nightly demo recipe pinning `pinned` (`omitted`: its [patches.omitted] lines): its plan,
    A and B."""
    from build_kernel import recipe as recipes
    from build_kernel.plan import resolve

    source = tmp_path / "upstream"
    good = commit_files(source, _files(), "A: the miniature")
    repo = git.Repo(source)
    repo.git.config("uploadpack.allowFilter", "true")
    repo.git.config("uploadpack.allowAnySHA1InWant", "true")
    broken = commit_files(source, {"README.md": README.replace(LAST, f"{LAST} (changed)")}, "B: the closing line")
    _series(tmp_path, "v1", {"0001-title.patch": P_PATCH})
    _series(tmp_path, "v2", {"0001-title.patch": P_PATCH, "0002-closing-line.patch": X_PATCH})
    (tmp_path / "recipes").mkdir()
    text = (REPO_ROOT / "recipes" / "demo-cppext.toml").read_text()
    text = (text.replace('repo = "example:minicppext"', f'repo = "file://{source}"')
            .replace('commit = "806180d731961fa7ee126d761559c41473c88b66"', f'commit = "{good}"')
            .replace('ref = "examples/minicppext"', 'ref = "main"')
            .replace('series = "minicppext"', 'series = "minicppext-nightly"')
            .replace('version = "v1"', f'version = "{pinned}"' + (f"\n\n[patches.omitted]\n{omitted}" if omitted else "")))
    path = write_recipe(tmp_path, "nightly-demo", text)
    plan = resolve(recipes.load(str(path)), env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
                   cache_dir=tmp_path / "cache")
    return plan, good, broken


def test_no_silent_downgrade_and_retirement_against_the_recipes_own_version(tmp_path: Path) -> None:
    """The series choice (in-process, no compile) on a real upstream: v2 (0001 + 0002) is the last good night's; v1
    (0001 alone) is older. Upstream first changes the closing line (v2's 0002 conflicts, v1 applies but lacks 0002,
    which upstream does not have): a conflict of v2 naming 0002, its hunk and that commit, not v1. Then upstream
    takes 0002 as it is (v2 no longer applies whole): v1 is chosen and 0002 is reported retired. A night whose last
    good version is v1 still reports 0002 retired, by the recipe's own v2."""
    from build_kernel.nightly import series_choice, upstream

    plan, good, broken = _two_versions(tmp_path, "v2")
    taken = commit_files(tmp_path / "upstream", {"README.md": README + "Built every night.\n"},
                         "C: upstream takes 0002")
    assert plan.series.directory.name == "v2"
    v1, v2 = series_choice.series_named(plan, "v1"), series_choice.series_named(plan, "v2")
    assert upstream.resolve(plan, "main", good).commit == taken  # as a night does first: the history since `good`

    conflict = series_choice.choose(plan, broken, reference=v2, good=good)
    assert conflict.chosen is None and conflict.retired == ()
    assert conflict.conflict is not None and conflict.conflict.patch == "0002-closing-line.patch"
    assert conflict.conflict.hunk.startswith("README.md hunk #1") and conflict.conflict.first_bad_commit == broken
    assert conflict.downgrades == ("v1",)
    assert conflict.to_dict()["tried"] == [
        {"version": "v2", "why_not": "0002-closing-line.patch conflicts"},
        {"version": "v1", "why_not": "older than v2 and lacks 0002-closing-line.patch, which upstream does not have "
                                     "(a downgrade would silently drop them)"}]

    retired = series_choice.choose(plan, taken, reference=v2, good=good)
    assert retired.chosen is not None and retired.chosen.directory.name == "v1"
    assert retired.retired == ("0002-closing-line.patch",) and retired.conflict is None
    assert retired.downgrades == () and [t[0] for t in retired.tried] == ["v2"]

    # The last good night was v1 (no 0002): 0002 is still reported retired, as the recipe's own v2 carries it.
    assert series_choice.choose(plan, taken, reference=v1, good=good).retired == ("0002-closing-line.patch",)


def test_a_patch_only_a_newer_version_than_the_recipes_carries_may_be_left_out(tmp_path: Path) -> None:
    """The recipe pins v1 (0001); v2 (0001 + 0002) is newer, an experiment the recipe never asked for, and was the
    last good night's. When upstream breaks 0002, the night falls back to v1 (no conflict): 0002 is no patch of the
    recipe's, so leaving it out is no silent downgrade of what the recipe promised."""
    from build_kernel.nightly import series_choice

    plan, good, broken = _two_versions(tmp_path, "v1")
    assert plan.series.directory.name == "v1"
    v2 = series_choice.series_named(plan, "v2")
    choice = series_choice.choose(plan, broken, reference=v2, good=good)
    assert choice.chosen is not None and choice.chosen.directory.name == "v1"
    assert choice.conflict is None and choice.downgrades == ()
    assert choice.to_dict()["tried"] == [{"version": "v2", "why_not": "0002-closing-line.patch conflicts"}]


def test_the_nightly_uses_no_other_modules_private_names() -> None:
    """build_kernel/nightly/ and its commands reach into no other module's privates (`from m import _x`, `m._x`):
    patch health's per-commit machinery they share (Fetcher, Tree, pyproject_version) is its public interface."""
    import ast

    found = []
    for path in [*sorted((REPO_ROOT / "build_kernel" / "nightly").glob("*.py")),
                 *sorted((REPO_ROOT / "build_kernel" / "cli").glob("nightly*.py"))]:
        tree = ast.parse(path.read_text())
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("build_kernel"):
                found += [f"{path.name}:{node.lineno} {a.name}" for a in node.names if a.name.startswith("_")]
                modules |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.Import):
                modules |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("build_kernel")}
        found += [f"{path.name}:{node.lineno} {node.value.id}.{node.attr}" for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                  and node.attr.startswith("_") and not node.attr.startswith("__")]
    assert found == []


def test_a_version_carrying_a_patch_the_recipe_leaves_out_is_no_candidate(tmp_path: Path) -> None:
    """The recipe pins v1 and lists v2's 0002 in [patches.omitted] (declined, with a reason): at A, where v2 (newer)
    applies whole, the night builds v1 and `tried` names 0002 and the recipe's reason; nothing conflicts."""
    from build_kernel.nightly import series_choice

    plan, good, _ = _two_versions(tmp_path, "v1", '"0002-closing-line" = "not measured yet"')
    assert plan.recipe.patches.omitted == {"0002-closing-line": "not measured yet"}
    choice = series_choice.choose(plan, good, reference=plan.series, good=None)
    assert choice.chosen is not None and choice.chosen.directory.name == "v1"
    assert choice.conflict is None and choice.downgrades == () and choice.declined == ("v2",)
    assert choice.to_dict()["tried"] == [{"version": "v2", "why_not": "carries 0002-closing-line.patch, which the "
                                                                       "recipe leaves out ([patches.omitted]: not "
                                                                       "measured yet)"}]


def test_the_nights_plan_takes_tonights_commit_as_one_the_chosen_version_was_made_for(tmp_path: Path) -> None:
    """A version whose info.toml lists the commits it was made for (sm120/v12: 0753182b only) is built by the night
    the series choice found it applies whole at: the night's plan adds tonight's commit (the fetch stage's
    applicability check passes), and nothing is written to the series folder."""
    from build_kernel.nightly import night
    from build_kernel.stages.fetch import workspace

    plan, good, broken = _two_versions(tmp_path, "v1")
    info = plan.series.directory / "info.toml"
    info.write_text(f'applies_to_commits = ["{good}"]\n')
    tonight = night.for_night(plan, broken, "v1", "2026-01-07")
    assert tonight.series.applies_to_commits == (good, broken) and tonight.version_dev == "20260107"
    workspace.check_applicability(tonight, broken, "")  # raises PatchError for a commit it was not made for
    assert info.read_text() == f'applies_to_commits = ["{good}"]\n'
