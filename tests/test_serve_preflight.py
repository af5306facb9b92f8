"""`build-kernel serve` refuses unless the server would import our verified wheel: each refusal.

A real virtualenv, real wheels installed into it by pip, the real inventory and the CLI as a
subprocess. sglang and torch in it are TEST DOUBLES (tiny wheels carrying only their names,
versions, sglang's requirement on the kernel and one sglang module that imports from it): the
real ones are gigabytes, and preflight reads only that metadata and source.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from build_kernel.stages.builder.provenance import FILE as PROVENANCE_FILE
from tests.conftest import REPO_ROOT, copy_series, demo_recipe_text, run_cli, write_recipe
from tests.test_publish import write_record

PATCHES = sorted((REPO_ROOT / "patches/minikernel/v1/series").read_text().split())
OURS = "0.3.21"
TORCH = "2.9.1"
FIX = "(run `build-kernel serve --install --recipe R`: it installs this wheel --no-deps and sglang beside it)"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel(folder: Path, dist: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()) -> Path:
    """A small real wheel (RECORD with hashes) of distribution `dist` holding `files`."""
    stem = f"{dist.replace('-', '_')}-{version}"
    meta = "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {**files, f"{stem}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n{meta}",
             f"{stem}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},sha256={_b64(t.encode())},{len(t.encode())}\n" for n, t in files.items())
    files[f"{stem}.dist-info/RECORD"] = record + f"{stem}.dist-info/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 2, 0, 0, 0)), text)
    return path


def kernel(folder: Path, version: str = OURS, *, dist: str = "sgl-kernel", value: str = "ours",
           native: str = "", torch: str = TORCH) -> Path:
    """An sgl_kernel wheel shaped like ours: a native library and our provenance (built against `torch`)."""
    stem = f"{dist.replace('-', '_')}-{version}"
    return wheel(folder, dist, version, {
        "sgl_kernel/__init__.py": f'VALUE = "{value}"\ndef rmsnorm(x): ...\n',
        "sgl_kernel/common_ops.abi3.so": f"not really ELF ({native or value})\n",
        f"{stem}.dist-info/{PROVENANCE_FILE}": json.dumps({"toolchain": {"torch": torch}}),
    })


def sglang(folder: Path, *, pin: str = f"sgl-kernel=={OURS}", imports: str = "rmsnorm") -> Path:
    """The sglang TEST DOUBLE: 0.5.9, its pin on the kernel, one module importing from it at start."""
    return wheel(folder, "sglang", "0.5.9", {"sglang/__init__.py": "",
                                             "sglang/srt/layers.py": f"from sgl_kernel import {imports}\n"},
                 requires=(pin,))


def torch_double(folder: Path, version: str = TORCH) -> Path:
    return wheel(folder, "torch", version, {"torch/__init__.py": f'__version__ = "{version}"\n'})


class Serve:
    """A project whose recipe serves from a virtualenv of its own, and our verified wheel."""

    def __init__(self, tmp_path: Path, project: Path) -> None:
        self.tmp = tmp_path
        self.env = tmp_path / "env"
        venv.create(self.env, with_pip=False)
        self.python = str(self.env / "bin" / "python")
        self.ours = kernel(tmp_path / "ours")
        write_record(self.ours, passed=True)
        model = tmp_path / "model"
        model.mkdir()
        (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
        copy_series(project, PATCHES, "v1")
        text = demo_recipe_text("v1").replace("[toolchain]\n", '[toolchain]\nsglang = "0.5.9"\n', 1)
        text = text.replace('import_modules = ["minikernel", "minikernel.flash_attn"]', 'import_modules = ["sgl_kernel"]')
        self.serve_env: dict[str, str] = {}
        self.recipe = write_recipe(project, "s", text + f'\n[serve]\nmodel = "{model}"\npython = "{self.python}"\n')

    def install(self, *wheels: Path) -> None:
        subprocess.run([sys.executable, "-m", "pip", "--python", self.python, "install", "-q", "--no-deps",
                        "--no-index", "--no-compile", *map(str, wheels)], check=True, capture_output=True)

    def site(self) -> Path:
        return Path(subprocess.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip())

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        if self.serve_env:
            self.recipe.write_text(self.recipe.read_text() + "\n[serve.env]\n"
                                   + "".join(f'{k} = "{v}"\n' for k, v in self.serve_env.items()))
        return run_cli("serve", str(self.ours), "--recipe", str(self.recipe), "--cache-dir", str(self.tmp / "cache"),
                       *args)

    def refusal(self) -> str:
        proc = self.cli()
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
        assert proc.returncode == 9 and len(lines) == 1, proc.stderr
        return lines[0]


@pytest.fixture
def serve(tmp_path: Path, project: Path) -> Serve:
    return Serve(tmp_path, project)


def test_no_installed_distribution_is_refused(serve: Serve) -> None:
    serve.install(sglang(serve.tmp / "w"), torch_double(serve.tmp / "w"))
    assert serve.refusal() == (f"error: refusing to serve: {serve.python} has no sgl-kernel: the server would not "
                               f"import our {serve.ours.name} {FIX}")


def test_another_version_installed_is_refused(serve: Serve) -> None:
    serve.install(kernel(serve.tmp / "old", "0.3.20"), sglang(serve.tmp / "w", pin="sgl-kernel>=0.3.20"),
                  torch_double(serve.tmp / "w"))
    assert serve.refusal() == (f"error: refusing to serve: {serve.python} has sgl-kernel 0.3.20, not ours ({OURS}) "
                               f"{FIX}")


def test_other_bytes_under_our_version_are_refused_by_the_installed_record(serve: Serve) -> None:
    """Same name and version, another build whose native library is ours: only its installed RECORD tells."""
    serve.install(kernel(serve.tmp / "theirs", value="theirs", native="ours"), sglang(serve.tmp / "w"),
                  torch_double(serve.tmp / "w"))
    assert serve.refusal() == (f"error: refusing to serve: the sgl_kernel in {serve.python} is not {serve.ours.name}: "
                               f"1 installed files are not the wheel's (e.g. sgl_kernel/__init__.py) {FIX}")


def test_an_import_that_resolves_elsewhere_is_refused(serve: Serve) -> None:
    serve.install(serve.ours, sglang(serve.tmp / "w"), torch_double(serve.tmp / "w"))
    shadow = serve.tmp / "shadow"
    (shadow / "sgl_kernel").mkdir(parents=True)
    (shadow / "sgl_kernel" / "__init__.py").write_text("")
    serve.serve_env = {"PYTHONPATH": str(shadow)}
    assert serve.refusal() == (f"error: refusing to serve: `import sgl_kernel` in {serve.python} finds "
                               f"{shadow / 'sgl_kernel' / '__init__.py'}, not our copy (a PYTHONPATH entry in "
                               f"[serve.env]?) {FIX}")


def test_another_distribution_of_the_package_is_refused(serve: Serve) -> None:
    rival = wheel(serve.tmp / "rival", "sglang-kernel", "0.4.0", {"sgl_kernel/_rival.py": ""})
    serve.install(serve.ours, rival, sglang(serve.tmp / "w"), torch_double(serve.tmp / "w"))
    assert serve.refusal() == (f"error: refusing to serve: {serve.python} also has sglang-kernel 0.4.0, which installs "
                               f"sgl_kernel too {FIX}")


def test_a_torch_other_than_the_wheels_is_refused(serve: Serve) -> None:
    serve.install(serve.ours, sglang(serve.tmp / "w"), torch_double(serve.tmp / "w", "2.8.0"))
    assert serve.refusal() == (f"error: refusing to serve: {serve.python} has torch 2.8.0; {serve.ours.name} was built "
                               f"against {TORCH} {FIX}")


# The pin refusals' own hint: reinstalling does not mend sglang's start-up check, the skip variable does.
SKIP = ("(set SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK = \"1\" in the recipe's [serve.env] to skip sglang's check (at your "
        "own risk), or serve an sglang whose kernel pin ours meets)")


def past_preflight(serve: Serve) -> bool:
    """Preflight let the serve through: it stopped at the next step, reading sglang's server flags (the double has
    none)."""
    proc = serve.cli()
    return proc.returncode == 9 and "cannot import sglang.srt.server_args" in proc.stderr and "refusing" not in proc.stderr


def test_a_kernel_older_than_sglangs_pin_is_refused(serve: Serve) -> None:
    """sglang's start-up check (engine.py: assert_pkg_version) refuses a kernel older than its pin's version."""
    serve.install(serve.ours, sglang(serve.tmp / "w", pin="sgl-kernel==0.3.22"), torch_double(serve.tmp / "w"))
    assert serve.refusal() == (f"error: refusing to serve: sglang 0.5.9 requires sgl-kernel==0.3.22 and ours is {OURS}, "
                               f"older than 0.3.22: sglang refuses it at start {SKIP}")


def test_the_skip_variable_in_serve_env_lets_an_older_kernel_through(serve: Serve) -> None:
    serve.install(serve.ours, sglang(serve.tmp / "w", pin="sgl-kernel==0.3.22"), torch_double(serve.tmp / "w"))
    serve.serve_env = {"SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK": "1"}
    assert past_preflight(serve)


def test_a_kernel_newer_than_sglangs_pin_passes(serve: Serve) -> None:
    """sglang at 0753182b pins sglang-kernel==0.4.2.post2 and its kernel is 0.4.3: the pin is pip's, the start-up
    check asks for at least that version."""
    serve.install(serve.ours, sglang(serve.tmp / "w", pin="sgl-kernel==0.3.20"), torch_double(serve.tmp / "w"))
    assert past_preflight(serve)


def test_a_kernel_under_another_distribution_name_than_sglangs_pin_is_refused(serve: Serve) -> None:
    """Both install sgl_kernel, but sglang's start-up check looks the pin's distribution up by name."""
    serve.install(serve.ours, sglang(serve.tmp / "w", pin=f"sglang-kernel=={OURS}"), torch_double(serve.tmp / "w"))
    assert serve.refusal() == ("error: refusing to serve: sglang 0.5.9 checks for sglang-kernel at start and ours is "
                               f"named sgl-kernel: sglang refuses it at start {SKIP}")


def test_sglang_importing_a_name_the_wheel_lacks_is_refused(serve: Serve) -> None:
    """Preflight passes (the right wheel, sglang and torch); the serve command's API check refuses."""
    serve.install(serve.ours, sglang(serve.tmp / "w", imports="rmsnorm, awq_marlin_repack"),
                  torch_double(serve.tmp / "w"))
    assert serve.refusal() == (f"error: refusing sglang 0.5.9 with {serve.ours.name}: sglang imports 1 name(s) on CUDA "
                               "that this sgl_kernel does not define, so the server would die with an ImportError: "
                               "awq_marlin_repack (srt/layers.py); pair the kernel with the sglang of its own commit "
                               "(change [serve] args, or pass --force to serve anyway, at your own risk)")
