"""Publish errors no other test reached (bench/code_health/error_sites.py, issue 68 item 1).

The real `publish` (what the CLI's publish and the pipeline's publish stage call) with real small
wheels (tests/test_publish.py's make_wheel), real static folders and a real pypiserver; each error
one line naming the problem and the fix, a PublishError (exit 8), the index left as it was.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from build_kernel import plan as plan_mod
from build_kernel.cli import cli
from build_kernel.errors import PublishError
from build_kernel.recipe.load import load
from build_kernel.stages import Context, upstream_tests
from build_kernel.stages import publish as pub
from build_kernel.stages.publish import backends, credentials, fresh_env, install_back, stage
from tests.conftest import write_recipe, write_series
from tests.test_publish import clean_env, make_wheel, target_for, write_record


@pytest.fixture
def no_inodes(tmp_path: Path) -> Iterator[Path]:
    """A real tmpfs with no free inode (nr_inodes=1: its root only): writable, and no name can be made in it.
    Mounting needs root (CAP_SYS_ADMIN): elsewhere the test skips, saying so."""
    folder = tmp_path / "full"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,nr_inodes=1", "tmpfs", str(folder)],
                          capture_output=True, text=True, check=False) if shutil.which("mount") else None
    if done is None or done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip() if done else 'no mount'}")
    yield folder
    subprocess.run(["umount", "--lazy", str(folder)], check=False)


def test_a_static_folder_that_cannot_be_created(tmp_path: Path, no_inodes: Path) -> None:
    """Its parent is a writable folder (the check before any work passes) and mkdir still fails."""
    wheel = make_wheel(tmp_path / "in", "bk-site", "1.0")
    folder = no_inodes / "index"
    env = clean_env()
    with pytest.raises(PublishError) as info:
        pub.publish([wheel], target_for(str(folder), tmp_path, env), env=env)
    assert info.value.exit_code == 8
    assert info.value.render() == (f"cannot create the static index folder {folder}: No space left on device "
                                   "(check the path and its permissions)")
    assert list(no_inodes.iterdir()) == []


def test_a_file_named_like_a_wheel_that_is_no_zip(tmp_path: Path) -> None:
    fake = tmp_path / "bk_fake-1.0-py3-none-any.whl"
    fake.write_text("<html>404</html>\n")  # what a download that failed leaves
    env = clean_env()
    with pytest.raises(PublishError) as info:
        pub.check([fake], target_for(str(tmp_path / "index"), tmp_path, env), force=True)
    assert info.value.render() == (f"{fake}: not a wheel: not a zip archive (publish the .whl that build produced "
                                   "(--force overrides verification, never this))")


def test_a_netrc_that_does_not_parse_hides_its_words(tmp_path: Path) -> None:
    path = tmp_path / "netrc"
    path.write_text("machine index.internal login alice password s3cret\nmacdef\n")
    with pytest.raises(PublishError) as info:
        credentials.from_netrc("https://index.internal/", {"NETRC": str(path)}, None)
    message = info.value.render()
    assert message.startswith(f"{path}: line ") and "s3cret" not in message
    assert message.endswith("(fix it (machine HOST login USER password PASSWORD; chmod 600), or set "
                            "TWINE_USERNAME/TWINE_PASSWORD)")


def test_an_upload_failure_twine_words_otherwise(tmp_path: Path) -> None:
    env = clean_env()
    target = target_for("http://127.0.0.1:9/", tmp_path, env)
    wheel = tmp_path / "bk_up-1.0-py3-none-any.whl"
    error = backends.classify_upload_failure(target, wheel, "1.0", "Uploading bk_up-1.0-py3-none-any.whl\n"
                                             "ERROR InvalidDistribution: Unknown distribution format\n")
    assert isinstance(error, PublishError)
    assert error.render() == ("uploading bk_up-1.0-py3-none-any.whl to http://127.0.0.1:9/ failed: ERROR "
                              "InvalidDistribution: Unknown distribution format (twine's whole output is in the publish "
                              "log; fix what it names, then run the same command again)")


def test_no_fresh_environment_to_install_back_into(tmp_path: Path) -> None:
    """An interpreter that runs and makes nothing (/bin/true stands for a Python without venv)."""
    env = clean_env()
    true = shutil.which("true") or "/bin/true"
    with pytest.raises(PublishError) as info:
        fresh_env.create(target_for(str(tmp_path / "index"), tmp_path, env), true, tmp_path / "fresh", env=env,
                         log_path=None)
    assert info.value.render() == (f"cannot make a fresh environment with {true} to install back into: (no output) "
                                   "(install that interpreter's venv module (Debian/Ubuntu: apt install python3-venv))")


def test_a_wheel_whose_metadata_says_another_version_than_its_name(tmp_path: Path) -> None:
    """File name 1.0, METADATA 1.0.0: the same version to pip (which installs it), not the one published."""
    wheel = make_wheel(tmp_path / "in", "bk-ver", "1.0")
    with zipfile.ZipFile(wheel) as src:
        members = {info: src.read(info) for info in src.infolist()}
    with zipfile.ZipFile(wheel, "w") as dst:
        for info, data in members.items():
            dst.writestr(info, data.replace(b"Version: 1.0\n", b"Version: 1.0.0\n")
                         if info.filename.endswith("METADATA") else data)
    write_record(wheel, passed=True)
    folder = tmp_path / "index"
    env = clean_env()
    with pytest.raises(PublishError) as info:
        pub.publish([wheel], target_for(str(folder), tmp_path, env), env=env)
    assert info.value.render() == (f"pip installed bk-ver 1.0.0 from {folder}, not 1.0 (the wheel's METADATA Version "
                                   "must be its file name's version, as written: rebuild it)")
    assert not (folder / wheel.name).exists()  # withdrawn: the index is as it was


def test_a_wheel_whose_own_tests_went_red_is_not_published(project: Path, tmp_path: Path) -> None:
    write_series(project, "s", "v1", {})
    path = write_recipe(project, "t", f"""\
        [source]
        repo = "https://example.invalid/x.git"
        commit = "{'a' * 40}"
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["12.0a"]
        [test]
        paths = ["tests"]
        """)
    wheel = make_wheel(tmp_path, "bk-red", "1.0")
    upstream_tests.record_path(wheel).write_text(json.dumps({
        "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(), "passed": False,
        "summary": {"red": ["tests/test_a.py::test_one"]}}))
    plan = plan_mod.resolve(load(str(path)), env={}, cache_dir=tmp_path / "cache", output_dir=tmp_path)
    with pytest.raises(PublishError) as info:
        stage._upstream_tests_gate(Context(plan, wheels=[wheel]), force=False)
    assert info.value.render() == (
        f"{wheel.name}: the package's own tests went red (tests/test_a.py::test_one) (see {wheel}.tests.json; fix the "
        "build, or list a known failure under [test.expect] with its evidence; --force publishes it anyway)")


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A real read-only tmpfs: not writable even by root (access(2) says EROFS). Mounting needs root: elsewhere
    the test skips, saying so."""
    folder = tmp_path / "ro"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                          capture_output=True, text=True, check=False) if shutil.which("mount") else None
    if done is None or done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip() if done else 'no mount'}")
    yield folder
    subprocess.run(["umount", "--lazy", str(folder)], check=False)


def test_a_static_folder_on_a_read_only_file_system(tmp_path: Path, read_only: Path) -> None:
    folder = read_only / "index"
    env = clean_env()
    with pytest.raises(PublishError) as info:
        pub.check_target(target_for(str(folder), tmp_path, env))
    assert info.value.exit_code == 8
    assert info.value.render() == (f"cannot publish into {folder}: {read_only} is not writable (fix its permissions, "
                                   "or pass --to a folder you can write)")


def test_a_static_folder_whose_name_is_too_long_through_the_cli(tmp_path: Path) -> None:
    """A name over the file system's 255 bytes (ENAMETOOLONG): one line, exit 8, before anything is copied."""
    wheel = make_wheel(tmp_path / "in", "bk-long", "1.0")
    folder = tmp_path / ("i" * 300) / "simple"
    runner = CliRunner(env={**clean_env(), "NO_COLOR": "1", "COLUMNS": "1000",
                            "BUILD_KERNEL_CACHE_DIR": str(tmp_path / "cache"),
                            "BUILD_KERNEL_CONFIG": str(tmp_path / "none.toml")})
    result = runner.invoke(cli, ["publish", str(wheel), "--to", str(folder)], prog_name="build-kernel",
                           catch_exceptions=False)
    assert result.exit_code == 8, result.output
    *progress, last = result.output.strip().splitlines()
    assert [line.split(" wheel(s) to ")[0] for line in progress] == ["▶ publish 1", "✕ publish 1"]  # the step's lines
    assert [last] == [
        f"error: cannot publish into {folder}: File name too long (pass --to a shorter folder path (at most 255 bytes "
        "a name, 4096 in all))"]


def test_a_netrc_that_cannot_be_read() -> None:
    """/proc/self/mem: a regular file (mode 0600, as a netrc should be) whose read fails with EIO, as a file on a
    failing disk does; root reads any file, so no permission bit can make one unreadable here."""
    with pytest.raises(PublishError) as info:
        credentials.from_netrc("https://index.internal/", {"NETRC": "/proc/self/mem"}, None)
    assert info.value.render() == ("/proc/self/mem: Input/output error (fix it (machine HOST login USER password "
                                   "PASSWORD; chmod 600), or set TWINE_USERNAME/TWINE_PASSWORD)")


def test_install_back_beside_a_lent_torch_that_lacks_a_requirement(tmp_path: Path) -> None:
    """The wheel installed --no-deps beside the build environment's torch: a requirement neither the index nor the
    lent packages hold is named, before pip is asked (install_back's check of what was lent)."""
    env = clean_env()
    target = target_for(str(tmp_path / "index"), tmp_path, env)
    with pytest.raises(PublishError) as info:
        install_back._check_lent(target, "bk-lent===1.0", ["torch==2.9.1", "numpy>=2; python_version >= '3'"],
                                 {"torch": "2.9.1"}, install_back._sources(target, ()),
                                 "install numpy into the build environment")
    assert info.value.exit_code == 8
    assert info.value.render() == (f"bk-lent 1.0 requires numpy>=2; python_version >= \"3\": neither {target.simple_url} "
                                   "nor the build environment (torch 2.9.1) holds it (install numpy into the build "
                                   "environment)")
