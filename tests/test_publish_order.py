"""publish checks the cheap things first and never leaves a broken file in an index (issue 39, item 5).

Real CLI runs, real wheels (tests.test_publish.make_wheel), real static folders; the recipe pins a
torch whose build environment does not exist, with the network closed, so building that environment
first would show as a pip error and an `envs/` folder in the cache.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from build_kernel.errors import PublishError
from build_kernel.stages import publish as pub
from tests.conftest import REPO_ROOT, run_cli
from tests.test_dry_runs import NO_NETWORK
from tests.test_publish import listing, make_wheel


def _recipe(folder: Path, *, publish: str = "") -> Path:
    """A real recipe file that pins torch (a build environment not made here)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pinned.toml"
    path.write_text(textwrap.dedent(f"""\
        extends = "{REPO_ROOT / 'recipes' / 'demo.toml'}"

        [toolchain]
        torch = "2.11.0+cu130"
        torch_index = "https://download.pytorch.org/whl/cu130"

        [verify]
        import_modules = ["bk_pub"]
        """) + publish)
    return path


def _publish(tmp_path: Path, *args: str, cwd: Path | None = None) -> tuple[int, str]:
    env = {**NO_NETWORK, "BUILD_KERNEL_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path / "home"),
           "BUILD_KERNEL_INDEXES": str(tmp_path / "no-indexes.toml")}
    proc = run_cli("publish", *args, env=env, cwd=cwd)
    return proc.returncode, proc.stdout + proc.stderr


def test_an_unverified_wheel_is_refused_before_any_environment_is_built(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "bk-pub", "1.0", verified=False)
    recipe = _recipe(tmp_path / "site")
    code, out = _publish(tmp_path, str(wheel), "--recipe", str(recipe), "--to", str(tmp_path / "index"))
    assert code == 7, out
    assert "has not been verified" in out and "installing torch" not in out
    assert not (tmp_path / "cache" / "envs").exists() and not (tmp_path / "index").exists()
    # The hint is a command that works as written: it names the recipe verify needs.
    assert f"build-kernel verify {wheel} --recipe {recipe}" in out


def test_the_hint_without_a_recipe_says_which_recipe_verify_needs(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "bk-pub", "1.0", verified=False)
    code, out = _publish(tmp_path, str(wheel), "--to", str(tmp_path / "index"))
    assert code == 7, out
    assert f"build-kernel verify {wheel} --recipe NAME" in out and "the recipe it was built with" in out


def test_the_hint_without_a_recipe_names_the_recipe_that_built_the_wheel(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "bk-pub", "1.0", verified=False,
                       extra={"bk_pub-1.0.dist-info/build_kernel_provenance.json": '{"recipe": "demo"}'})
    code, out = _publish(tmp_path, str(wheel), "--to", str(tmp_path / "index"))
    assert code == 7, out
    assert f"build-kernel verify {wheel} --recipe demo`" in out


def test_an_unwritable_target_is_refused_before_any_environment_is_built(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "bk-pub", "1.0")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, out = _publish(tmp_path, str(wheel), "--recipe", str(_recipe(tmp_path / "site")), "--to",
                         str(blocker / "index"))
    assert code == 8, out
    assert "installing torch" not in out and str(blocker) in out
    assert not (tmp_path / "cache" / "envs").exists()


def test_force_never_puts_a_non_wheel_into_an_index(tmp_path: Path) -> None:
    fake = tmp_path / "w" / "bk_pub-1.0-py3-none-any.whl"
    fake.parent.mkdir()
    fake.write_text("this is not a zip archive")
    index = tmp_path / "index"
    code, out = _publish(tmp_path, str(fake), "--to", str(index), "--force")
    assert code in (7, 8), out  # the CLI's wheel argument check (7) or publish's own (8)
    assert "not a wheel" in out and "zip" in out
    assert not index.exists()
    # publish itself (the pipeline's stage calls it, no CLI argument check before it) refuses it too.
    target = pub.resolve_target(str(index), env={}, indexes_file=tmp_path / "none", pypirc=tmp_path / "none")
    with pytest.raises(PublishError, match=r"not a wheel: not a zip archive"):
        pub.publish([fake], target, force=True, env={})
    assert not index.exists()


def test_force_takes_a_wheel_that_fails_install_back_out_of_the_index_again(tmp_path: Path) -> None:
    index = tmp_path / "index"
    good = make_wheel(tmp_path / "good", "bk-good", "1.0")
    code, out = _publish(tmp_path, str(good), "--to", str(index))
    assert code == 0, out
    before = listing(index)
    broken = make_wheel(tmp_path / "w", "bk-pub", "1.0", verified=False,
                        extra={"bk_pub/__init__.py": "raise ImportError('broken on purpose')\n"})
    code, out = _publish(tmp_path, str(broken), "--to", str(index), "--force")
    assert code == 8, out
    assert "broken on purpose" in out and "removed" in out
    assert listing(index) == before  # the folder as it was: the good wheel and its pages only


def test_a_relative_recipe_target_resolves_from_the_current_directory(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "bk-pub", "1.0")
    overlay = tmp_path / "site" / "overlay.toml"
    overlay.parent.mkdir()
    overlay.write_text(textwrap.dedent(f"""\
        extends = "{REPO_ROOT / 'recipes' / 'demo.toml'}"

        [verify]
        import_modules = ["bk_pub"]

        [publish]
        target = "pubrel/out"
        """))
    work = tmp_path / "work"
    work.mkdir()
    code, out = _publish(tmp_path, str(wheel), "--recipe", str(overlay), cwd=work)
    assert code == 0, out
    assert (work / "pubrel" / "out" / wheel.name).is_file()
    assert not (tmp_path / "pubrel").exists()
