"""Issue 39, items 1, 2 and 6: what the CLI prints.

1. Text and `--json` carry the same words: rich markup no longer eats `[patches]`, `[serve] sglang`.
2. No traceback without `--debug`: a text file, an empty file, a zip without METADATA, a folder or a
   truncated wheel where a wheel is expected is one line naming it; anything unexpected is one line too.
6. `--json` and `--debug` on every command, before or after it; a failure under `--json` is one JSON
   error object on stdout.

Through the real CLI (click's CliRunner drives the root group's own `main`, the one exit), on real
files; nothing compiles.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from build_kernel import errors, log
from build_kernel.cli import cli
from tests.conftest import REPO_ROOT, copy_series, demo_recipe_text, run_cli, write_recipe

SERVE = '\n[serve]\nmodel = "/models/tiny-llama"\nsglang = "source"\n'


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    """The CLI in this process, as `build-kernel ARGS` (wide, colourless tables: a cell is one line)."""
    runner = CliRunner(env={"NO_COLOR": "1", "COLUMNS": "1000", **(env or {})})
    return runner.invoke(cli, list(args), prog_name="build-kernel", catch_exceptions=False)


def make_wheel(path: Path, members: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def good_wheel(folder: Path) -> Path:
    """A small pure wheel: a real zip with its dist-info (what the wheel check asks of one)."""
    info = "demo_pkg-1.0.dist-info"
    return make_wheel(folder / "demo_pkg-1.0-py3-none-any.whl", {
        "demo_pkg/__init__.py": b"",
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/RECORD": b""})


def damaged_wheel(folder: Path) -> Path:
    """A wheel whose index and METADATA are sound and whose library's compressed bytes are not: only
    the stage that reads the library finds out."""
    wheel = make_wheel(folder / "dmg_pkg-1.0-py3-none-any.whl", {
        "minikernel/common_ops.abi3.so": bytes(range(256)) * 64,
        "dmg_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: dmg-pkg\nVersion: 1.0\n"})
    raw = bytearray(wheel.read_bytes())
    at = raw.index(b"minikernel/common_ops.abi3.so") + len("minikernel/common_ops.abi3.so") + 5
    raw[at:at + 2] = bytes(b ^ 0xFF for b in raw[at:at + 2])
    wheel.write_bytes(bytes(raw))
    return wheel


@dataclass
class Project:
    root: Path
    cache: Path
    wheel: Path
    damaged: Path
    empty_dir: Path
    bad_config: Path


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("cli-output")
    (root / "recipes").mkdir()
    (root / "patches").symlink_to(REPO_ROOT / "patches")
    write_recipe(root, "toolchain", demo_recipe_text().replace('cmake = ">=3.26"', 'cmake = ">=99"'))
    write_recipe(root, "serving", demo_recipe_text() + SERVE)
    (root / "empty").mkdir()
    bad_config = root / "config.toml"
    bad_config.write_text('[mirrors]\n"https://github.com/" = 3\n')
    # A program that dies of a real SIGINT, as a child does when Ctrl-C reaches only it.
    (root / "sigint-bin").mkdir()
    (root / "sigint-bin" / "sccache-dist").write_text(f"#!{sys.executable}\nimport os, signal\n"
                                                      "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
                                                      "os.kill(os.getpid(), signal.SIGINT)\n")
    (root / "sigint-bin" / "sccache-dist").chmod(0o755)
    return Project(root, root / "cache", good_wheel(root / "good"), damaged_wheel(root / "damaged"), root / "empty",
                   bad_config)


# --- 1 and 6: one error, the same words as text and as JSON, for every kind -----------------------------------

Case = Callable[[Project], tuple[list[str], dict[str, str]]]
CASES: dict[str, Case] = {
    "RecipeError": lambda p: (["plan", "-r", "nosuch"], {}),
    "ToolchainError": lambda p: (["build", "-r", str(p.root / "recipes/toolchain.toml"), "--cache-dir", str(p.cache)], {}),
    # Its message quotes "[mirrors]": the words that markup used to eat.
    "FetchError": lambda p: (["plan", "-r", "demo"], {"BUILD_KERNEL_CONFIG": str(p.bad_config)}),
    "PatchError": lambda p: (["patch", "lock", str(p.empty_dir)], {}),
    # (dist-config with an empty PATH no longer fails: sccache-dist is also looked for beside the interpreter.)
    "BuildError": lambda p: (["cache", "stats", "-r", "demo", "--compile-cache", "sccache", "--cache-url",
                              "weird://cache"], {}),
    "VerifyError": lambda p: (["verify", str(p.root / "recipes/toolchain.toml"), "-r", "demo", "--static"], {}),
    "PublishError": lambda p: (["publish", str(p.wheel), "--to", "ftp://example.invalid/"], {}),
    "TestError": lambda p: (["test", str(p.wheel), "-r", "demo", "--file", "nomatch*", "--cache-dir", str(p.cache)], {}),
    "ServeError": lambda p: (["serve", str(p.wheel), "-r", "demo", "--model", "/nonexistent/model",
                              "--cache-dir", str(p.cache)], {}),
    "UsageError": lambda p: (["plan", "--no-such-option"], {}),
    "Interrupted": lambda p: (["cache", "dist-config", "--scheduler", "127.0.0.1:10600", "--server", "127.0.0.1:10501",
                               "--out", str(p.root / "farm")], {"PATH": f"{p.root / 'sigint-bin'}:{os.environ['PATH']}"}),
    # Not a BuildKernelError: --out names a file, and making the folder there raises FileExistsError.
    "InternalError": lambda p: (["cache", "dist-config", "--scheduler", "127.0.0.1:10600", "--server", "127.0.0.1:10501",
                                 "--out", str(p.bad_config)], {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}),
}
def _small_cache(p: Project) -> tuple[list[str], dict[str, str]]:
    """The pipeline with its cache on a 1 MB tmpfs: the preflight says so before any work (the same line each run).
    Mounting needs root: skipped elsewhere (tests/test_disk_full.py has the rest)."""
    cache = p.root / "small-cache"
    if not os.path.ismount(cache):
        cache.mkdir(exist_ok=True)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(cache)], capture_output=True,
                          check=False).returncode:
            pytest.skip("DiskFullError's case needs a tmpfs mount (root)")
        atexit.register(subprocess.run, ["umount", "--lazy", str(cache)], check=False)
    return ["--cache-dir", str(cache), "--recipe", "demo", "--arch", "12.0a"], {}


CASES["DiskFullError"] = _small_cache
EXIT = {"UsageError": 2, "InternalError": 1,
        **{cls.__name__: cls.exit_code for cls in errors.BuildKernelError.__subclasses__()}}


def raised_kinds() -> set[str]:
    """Every error kind the code constructs somewhere (errors.py defines them; NotBuiltYet is used nowhere)."""
    source = "\n".join(p.read_text() for p in (REPO_ROOT / "build_kernel").rglob("*.py") if p.name != "errors.py")
    # The kinds errors.py defines: a module's private subclass (cgroup's, for the bench) is only listed in
    # __subclasses__() once some other test imported it, which made this test depend on the run's order.
    return {cls.__name__ for cls in errors.BuildKernelError.__subclasses__()
            if cls.__module__ == errors.__name__ and re.search(rf"\b{cls.__name__}\(", source)}


def test_every_error_kind_the_code_raises_has_a_case() -> None:
    assert raised_kinds() - set(CASES) == set()


@pytest.mark.parametrize("kind", sorted(CASES))
def test_an_error_carries_the_same_words_as_text_and_as_json(kind: str, project: Project) -> None:
    argv, env = CASES[kind](project)
    text, as_json = invoke(*argv, env=env), invoke(*argv, "--json", env=env)
    assert text.exit_code == as_json.exit_code == EXIT[kind], text.stderr
    assert text.stdout == "" and "Traceback" not in text.stderr + as_json.stderr
    lines = text.stderr.splitlines()
    said = [line for line in lines if line.startswith("error: ")]
    assert said and said == lines[-len(said):]  # the error ends the output; a stage's ✕ line may come first
    data = json.loads(as_json.stdout)  # the whole of stdout: one object
    assert set(data) == {"error"} and data["error"]["kind"] == kind and data["error"]["exit_code"] == EXIT[kind]
    assert [f"error: {line}" for line in data["error"]["lines"]] == said
    assert [line for line in as_json.stderr.splitlines() if line.startswith("error: ")] == said  # the log too
    if kind == "FetchError":
        assert "[mirrors] must map URL prefixes" in said[0]
    if kind == "Interrupted":  # not "sccache-dist exited -2": a Ctrl-C is no failure of the command
        assert said == ["error: interrupted; run the same command to resume"]


# --- 1: results, text and JSON ---------------------------------------------------------------------------------

def test_plan_text_keeps_bracketed_recipe_words(project: Project) -> None:
    recipe = str(project.root / "recipes/serving.toml")
    data = json.loads(invoke("plan", "-r", recipe, "--json").stdout)
    describe = data["serve"]["sglang"]["describe"]
    assert describe.endswith("([serve] sglang)")
    text = invoke("plan", "-r", recipe)
    assert text.exit_code == 0 and describe in text.stdout


def test_doctor_problems_read_the_same_as_text_and_json(tmp_path: Path) -> None:
    """A series that keeps C++17 against a torch that needs C++20: the fix names `[patches] version`."""
    names = (REPO_ROOT / "patches/minikernel/v1/series").read_text().split()
    for version, standard in (("v0", "17"), ("v1", "20")):
        copy = copy_series(tmp_path, names, version)  # the pooled patches, as files of their own
        (copy / "info.toml").write_text((copy / "info.toml").read_text().replace("cxx_standard = 20",
                                                                                    f"cxx_standard = {standard}"))
    (tmp_path / "recipes").mkdir()
    recipe = str(write_recipe(tmp_path, "old", demo_recipe_text("v0")))
    data = json.loads(invoke("doctor", "-r", recipe, "--json").stdout)
    if not any("[patches]" in p for p in data["problems"]):
        pytest.skip(f"this torch ({data['tools']['torch_version']}) accepts C++17: no [patches] fix to print")
    text = invoke("doctor", "-r", recipe)
    assert text.exit_code == 3
    for problem in data["problems"]:
        assert problem in text.stdout
    assert 'use [patches] version = "v1"' in text.stdout


def test_dry_run_statuses_read_the_same_as_text_and_json() -> None:
    data = json.loads(invoke("--dry-run", "-r", "demo", "--json").stdout)
    text = invoke("--dry-run", "-r", "demo").stdout
    assert data["stages"]["serve"]["status"] == "no [serve] model in the recipe"
    for stage in data["stages"].values():
        assert stage["status"] in text


def test_warnings_and_steps_print_bracketed_words(capsys: pytest.CaptureFixture[str]) -> None:
    log.warn('use [patches] version = "v6" (and [red]this[/] is not a style)')
    with log.step("verify [verify] ops"):
        pass
    err = capsys.readouterr().err
    assert 'warning: use [patches] version = "v6" (and [red]this[/] is not a style)' in err
    assert "▶ verify [verify] ops" in err and "✓ verify [verify] ops" in err


# --- 2: a file that is not a wheel, wherever a wheel is expected -----------------------------------------------

NOT_WHEELS: dict[str, Callable[[Path], None]] = {
    "text file": lambda p: p.write_text("this is not a wheel\n"),
    "empty file": lambda p: p.write_bytes(b""),
    "zip without METADATA": lambda p: make_wheel(p, {"demo_pkg/__init__.py": b""}) and None,
    "directory": lambda p: p.mkdir(),
    "truncated wheel": lambda p: p.write_bytes(good_wheel(p.parent / "whole").read_bytes()[:200]),
}
COMMANDS: dict[str, Callable[[Path, Path], list[str]]] = {
    "verify": lambda bad, good: ["verify", str(bad), "-r", "demo", "--static"],
    "verify (newest in --output-dir)": lambda bad, good: ["verify", "-r", "demo", "--static", "--output-dir",
                                                          str(bad.parent)],
    "publish": lambda bad, good: ["publish", str(bad), "--to", str(bad.parent / "index")],
    "prune-proof PRUNED": lambda bad, good: ["prune-proof", str(bad), "--against", str(good)],
    "prune-proof --against": lambda bad, good: ["prune-proof", str(good), "--against", str(bad)],
    "serve": lambda bad, good: ["serve", str(bad), "-r", "demo"],
    "test": lambda bad, good: ["test", str(bad), "-r", "demo", "--dry-run"],
}


@pytest.mark.parametrize("what", sorted(NOT_WHEELS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_file_that_is_not_a_wheel_is_one_line_naming_it(command: str, what: str, tmp_path: Path,
                                                          project: Project) -> None:
    bad = tmp_path / "given" / "bad_pkg-1.0-py3-none-any.whl"
    bad.parent.mkdir()
    NOT_WHEELS[what](bad)
    result = invoke(*COMMANDS[command](bad, project.wheel))
    assert result.exit_code == errors.VerifyError.exit_code, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {bad} is not a wheel: ") and line.endswith("made)")


@pytest.mark.parametrize("command", ["verify", "prune-proof"])
def test_a_wheel_damaged_past_its_index_is_one_line_naming_it(command: str, project: Project) -> None:
    """The wheel check reads the index and METADATA; the library's broken bytes are found by the stage
    that decompresses them, and still named by the wheel they are in."""
    argv = (["verify", str(project.damaged), "-r", "demo", "--static", "--cache-dir", str(project.cache)]
            if command == "verify" else ["prune-proof", str(project.damaged), "--against", str(project.wheel)])
    result = invoke(*argv)
    assert result.exit_code == errors.VerifyError.exit_code and "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert str(project.damaged) in line and " is damaged: zlib.error: " in line


def test_debug_shows_the_traceback_that_is_otherwise_one_line(project: Project) -> None:
    argv = ["verify", str(project.damaged), "-r", "demo", "--static", "--cache-dir", str(project.cache)]
    plain, debug = run_cli(*argv), run_cli(*argv, "--debug")
    assert plain.returncode == debug.returncode == errors.VerifyError.exit_code
    assert "Traceback" not in plain.stderr and plain.stderr.splitlines()[-1].startswith(f"error: {project.damaged} is")
    assert "Traceback (most recent call last)" in debug.stderr and "zlib.error" in debug.stderr
    assert debug.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1]  # the traceback, then the same line


# --- 6: --json and --debug on every command, before and after it -----------------------------------------------

def command_paths(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in group.commands.items():
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from command_paths(command, (*prefix, name))


@pytest.mark.parametrize("path", [(), *command_paths()], ids=lambda p: " ".join(p) or "(pipeline)")
def test_json_and_debug_work_before_and_after_every_command(path: tuple[str, ...]) -> None:
    for argv in ([*path, "--json", "--debug", "--help"], ["--json", "--debug", *path, "--help"]):
        assert invoke(*argv).exit_code == 0, argv
    for argv in ([*path, "--no-such-option", "--json", "--debug"], ["--json", "--debug", *path, "--no-such-option"]):
        result = invoke(*argv)
        error = json.loads(result.stdout)["error"]
        assert result.exit_code == 2 and error["kind"] == "UsageError" and "--no-such-option" in error["message"]
        assert result.stderr == f"error: {error['message']}\n"
    # Run for real with a recipe that does not exist: whatever the command makes of it, stdout is one JSON
    # document (an error object when it fails), and no traceback.
    for argv in ([*path, "--recipe", "nosuch", "--json"], ["--json", "--recipe", "nosuch", *path]):
        result = invoke(*argv)
        data = json.loads(result.stdout)
        assert "Traceback" not in result.stderr
        if result.exit_code != 0:
            assert set(data) == {"error"} and data["error"]["exit_code"] == result.exit_code
