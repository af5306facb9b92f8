"""Issue 42 item 3: a 9.0a build compiles only the FA3 kernels the served model calls.

Three parts, each run for real here: the tool's choice (`[build] fa3*`, derived from a model's config.json or
listed) and its defines in the plan; the CMake rule the series patch adds (cmake/fa3_variants.cmake, taken
from patches/sm120/pool/0010-fa3-variants.patch and run by the venv's cmake over a folder of upstream's
instantiation file names); and the wheel's one-line error (python/sgl_kernel/fa3_variants.py from the same
patch, imported with torch). Upstream's tree is not here: the instantiation files are made with upstream's
names and the #include lines of its aggregate units; nothing is compiled.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from unidiff import PatchSet

from build_kernel import fa3_variants, plan
from build_kernel.errors import RecipeError
from build_kernel.recipe import load
from build_kernel.resources import Resources

ROOT = Path(__file__).resolve().parent.parent
PATCH = ROOT / "patches" / "sm120" / "pool" / "0010-fa3-variants.patch"
RES = Resources(cpus=16, cpus_why="test", memory_bytes=128 * 1024**3, memory_why="test")

# Config shapes as the hub's config.json files have them (only the keys the choice reads, plus a few others).
LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "torch_dtype": "bfloat16"}
GEMMA2 = {"architectures": ["Gemma2ForCausalLM"], "hidden_size": 3584, "num_attention_heads": 16, "head_dim": 256,
          "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "torch_dtype": "bfloat16"}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_attention_heads": 128,
               "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
               "torch_dtype": "bfloat16"}
QWEN35 = {"architectures": ["Qwen3_5MoeForConditionalGeneration"],
          "text_config": {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256,
                          "torch_dtype": "bfloat16"}}


def test_variants_follow_the_models_attention() -> None:
    llama = fa3_variants.from_config(LLAMA)
    assert (llama.head_dims, llama.dtypes, llama.softcap) == (("128",), ("bf16",), False)
    assert llama.defines() == {"SGL_KERNEL_FA3_HDIMS": "128", "SGL_KERNEL_FA3_DTYPES": "bf16",
                               "SGL_KERNEL_FA3_SOFTCAP": "OFF"}
    gemma = fa3_variants.from_config(GEMMA2)
    assert (gemma.head_dims, gemma.softcap) == (("256",), True)
    # MLA: prefill (192, 128) and decode (64, 512); each pair brings the plain kernels it falls back to.
    mla = fa3_variants.from_config(DEEPSEEK_V3)
    assert mla.head_dims == ("64", "192", "64_256", "64_512", "192_128")
    assert fa3_variants.from_config(QWEN35).head_dims == ("256",)
    # The served dtype and KV cache: fp16 beside bf16 (always built), e4m3 for an fp8_e4m3 cache.
    fp16 = fa3_variants.from_config({**LLAMA, "torch_dtype": "float16"}, ["--kv-cache-dtype", "fp8_e4m3"])
    assert fp16.dtypes == ("bf16", "fp16", "e4m3")
    assert fa3_variants.from_config(LLAMA, ["--dtype=float16"]).dtypes == ("bf16", "fp16")
    # A width between kernels runs the next one up, as flash_api.cpp rounds.
    assert fa3_variants.from_config({**LLAMA, "head_dim": 80}).head_dims == ("96",)


def test_a_head_dim_fa3_cannot_run_is_one_line_with_the_fix() -> None:
    with pytest.raises(RecipeError) as info:
        fa3_variants.from_config({**LLAMA, "head_dim": 512}, source="m/config.json")
    (line,) = info.value.problems
    assert "no kernel for head dim 512" in line and "m/config.json" in line and 'fa3 = "all"' in line


def test_model_config_is_found_in_a_folder_or_the_hugging_face_cache(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(GEMMA2))
    got = fa3_variants.resolve("model", head_dims=(), dtypes=(), softcap=False, model=str(folder), serve_args=(),
                               env={})
    assert got.softcap and str(folder / "config.json") in got.why
    repo = tmp_path / "hf" / "hub" / "models--org--tiny"
    for rev, config in (("old", LLAMA), ("abc123", DEEPSEEK_V3)):
        (repo / "snapshots" / rev).mkdir(parents=True)
        (repo / "snapshots" / rev / "config.json").write_text(json.dumps(config))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123\n")
    got = fa3_variants.resolve("model", head_dims=(), dtypes=(), softcap=False, model="org/tiny", serve_args=(),
                               env={"HF_HOME": str(tmp_path / "hf")})
    assert "192_128" in got.head_dims  # refs/main's snapshot, not the other one
    with pytest.raises(RecipeError) as info:
        fa3_variants.resolve("model", head_dims=(), dtypes=(), softcap=False, model="org/absent", serve_args=(),
                             env={"HF_HOME": str(tmp_path / "hf")})
    (line,) = info.value.problems
    assert "huggingface-cli download org/absent config.json" in line and "models--org--absent" in line


def _overlay(tmp_path: Path, body: str, name: str = "o.toml") -> Path:
    path = tmp_path / name
    path.write_text(f'extends = "nightly-cu130-pruned"\n[build]\narch = ["9.0a"]\nfp4 = false\n{body}')
    return path


def test_the_plan_carries_the_choice_into_the_build_defines(tmp_path: Path) -> None:
    shipped = plan.resolve(load(str(_overlay(tmp_path, ""))), env={}, resources=RES)
    assert shipped.fa3.defines()["SGL_KERNEL_FA3_HDIMS"] == "256"  # the recipe's model: Qwen3.5's head_dim
    assert shipped.to_dict()["fa3"]["dtypes"] == ["bf16"]
    everything = plan.resolve(load(str(_overlay(tmp_path, 'fa3 = "all"\nfa3_head_dims = []\nfa3_dtypes = []\n'))),
                              env={}, resources=RES)
    assert everything.fa3.defines() == {}
    # 12.0a: sgl-kernel compiles no FA3, so no model config is looked for.
    sm120 = plan.resolve(load("nightly-cu130-pruned"), env={}, resources=RES)
    assert sm120.fa3.defines() == {} and "not read" in sm120.fa3.why


def test_a_series_without_the_rule_is_refused_rather_than_compiling_everything(tmp_path: Path) -> None:
    old = _overlay(tmp_path, "[patches]\nversion = \"v7\"\n")
    with pytest.raises(RecipeError) as info:
        plan.resolve(load(str(old)), env={}, resources=RES)
    (line,) = info.value.problems
    assert "sm120/v7" in line and "SGL_KERNEL_FA3_HDIMS" in line and 'fa3 = "all"' in line


@pytest.mark.parametrize(("body", "key", "words"), [
    ('fa3 = "some"\n', "build.fa3", "'some' is not one of all, model, listed"),
    ('fa3_head_dims = ["100"]\n', "build.fa3_head_dims", "'100' is not one of 64"),
    ('fa3_dtypes = ["e5m2"]\n', "build.fa3_dtypes", "'e5m2' is not one of bf16, fp16, e4m3"),
    ('fa3 = "all"\nfa3_dtypes = ["bf16"]\n', "build.fa3_dtypes", 'read only with fa3 = "listed"'),
    ('fa3 = "listed"\nfa3_head_dims = []\n', "build.fa3_head_dims", "needs the head dims"),
])
def test_bad_fa3_keys_are_named_with_the_fix(tmp_path: Path, body: str, key: str, words: str) -> None:
    with pytest.raises(RecipeError) as info:
        load(str(_overlay(tmp_path, body)))
    assert any(key in line and words in line for line in info.value.problems), info.value.problems


# --- the series patch's own files ------------------------------------------------------------------------------


def _new_file(path: str) -> str:
    """A file 0010 creates, as its added lines."""
    for pf in PatchSet(PATCH.read_text()):
        if pf.is_added_file and pf.path == path:
            return "".join(line.value for hunk in pf for line in hunk if line.is_added)
    raise AssertionError(f"{PATCH.name} creates no {path}")


VARIANTS = ("", "_packgqa", "_paged", "_paged_softcap", "_paged_split", "_paged_split_softcap", "_softcap",
            "_softcap_packgqa", "_split", "_split_softcap")


def _instantiations(folder: Path) -> None:
    """Upstream's sm90 forward instantiation names (sgl-attn hopper/instantiations), aggregates included."""
    folder.mkdir()
    for t in ("bf16", "fp16", "e4m3"):
        plain = ["64", "96", "128", "192", "256"]
        pairs = ["192_128"] + (["64_256", "64_512"] if t != "e4m3" else [])
        for v in VARIANTS:
            for h in plain + pairs:
                (folder / f"flash_fwd_hdim{h}_{t}{v}_sm90.cu").write_text("// one instantiation\n")
            for agg, members in (("all", plain), ("diff", pairs)):
                (folder / f"flash_fwd_hdim{agg}_{t}{v}_sm90.cu").write_text(
                    "".join(f'#include "flash_fwd_hdim{h}_{t}{v}_sm90.cu"\n' for h in members))


def _select(tmp_path: Path, **cache: str) -> subprocess.CompletedProcess[str]:
    """cmake -P over the instantiations, with upstream's globs (sgl-kernel's CMakeLists.txt at 6ffc74ef)."""
    module = tmp_path / "fa3_variants.cmake"
    module.write_text(_new_file("cmake/fa3_variants.cmake"))
    if not (tmp_path / "inst").exists():
        _instantiations(tmp_path / "inst")
    script = tmp_path / "select.cmake"
    script.write_text(f"""cmake_minimum_required(VERSION 3.26)
include({module})
set(D {tmp_path / 'inst'})
set(S "")
foreach(t bf16 fp16 e4m3)
    file(GLOB a "${{D}}/flash_fwd_hdim[0-9]*_${{t}}*_sm90.cu")
    file(GLOB b "${{D}}/flash_fwd_hdimdiff_${{t}}*_sm90.cu")
    list(APPEND S ${{a}} ${{b}})
endforeach()
list(LENGTH S n)
message("UPSTREAM=${{n}}")
sgl_kernel_fa3_select(S DEFS JSON)
message("DEFS=${{DEFS}}")
message("JSON=${{JSON}}")
foreach(s IN LISTS S)
    get_filename_component(name "${{s}}" NAME)
    message("KEPT=${{name}}")
endforeach()
""")
    cmake = shutil.which("cmake", path=str(Path(sys.executable).parent)) or "cmake"
    args = [cmake, *(f"-D{k}={v}" for k, v in cache.items()), "-P", str(script)]
    return subprocess.run(args, check=False, capture_output=True, text=True, timeout=60)


def _lines(out: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in out.splitlines() if line.startswith(key + "=")]


def test_the_cmake_rule_keeps_only_the_asked_units_and_tells_flash_api_the_rest(tmp_path: Path) -> None:
    full = _select(tmp_path)
    assert full.returncode == 0, full.stderr
    out = full.stdout + full.stderr
    # Upstream's globs list 250 units; 30 are aggregates of units they list as well: gone even for "all".
    assert _lines(out, "UPSTREAM") == ["250"]
    assert len(_lines(out, "KEPT")) == 220 and not [k for k in _lines(out, "KEPT") if "hdimdiff" in k]
    assert _lines(out, "DEFS") == [""] and _lines(out, "JSON") == [""]

    one = _select(tmp_path, SGL_KERNEL_FA3_HDIMS="256", SGL_KERNEL_FA3_DTYPES="bf16", SGL_KERNEL_FA3_SOFTCAP="OFF")
    out = one.stdout + one.stderr
    assert sorted(_lines(out, "KEPT")) == sorted(f"flash_fwd_hdim256_bf16{v}_sm90.cu" for v in VARIANTS
                                                 if "softcap" not in v)
    defs = _lines(out, "DEFS")[0].split(";")
    assert {"FLASHATTENTION_DISABLE_HDIM64", "FLASHATTENTION_DISABLE_HDIM128", "FLASHATTENTION_DISABLE_HDIMDIFF64",
            "FLASHATTENTION_DISABLE_FP16", "FLASHATTENTION_DISABLE_FP8", "FLASHATTENTION_DISABLE_SOFTCAP"} <= set(defs)
    assert "FLASHATTENTION_DISABLE_HDIM256" not in defs
    assert json.loads(_lines(out, "JSON")[0]) == {"head_dims": ["256"], "dtypes": ["bf16"], "softcap": False}

    mla = _select(tmp_path, SGL_KERNEL_FA3_HDIMS="192_128;64_512", SGL_KERNEL_FA3_DTYPES="bf16;e4m3",
                  SGL_KERNEL_FA3_SOFTCAP="OFF")
    out = mla.stdout + mla.stderr
    kept = _lines(out, "KEPT")
    # 64_512 brings 64_256 (one switch upstream) and both pairs their plain base; e4m3 has no 64-wide pairs.
    assert {k.split("_")[2] for k in kept} >= {"hdim64", "hdim192"}
    # Five split / paged / pack-GQA units each: bf16 x (64, 192, 64_256, 64_512, 192_128), e4m3 x (64, 192, 192_128).
    assert len(kept) == 5 * (5 + 3) and "FLASHATTENTION_DISABLE_HDIMDIFF64" not in _lines(out, "DEFS")[0]


@pytest.mark.parametrize(("cache", "words"), [
    ({"SGL_KERNEL_FA3_DTYPES": "fp16"}, "leaves out bf16"),
    ({"SGL_KERNEL_FA3_HDIMS": "100"}, "unknown head dim '100'"),
])
def test_the_cmake_rule_refuses_what_it_cannot_build(tmp_path: Path, cache: dict[str, str], words: str) -> None:
    bad = _select(tmp_path, **cache)
    assert bad.returncode != 0 and words in bad.stderr.replace("\n  ", " ")
    assert not _lines(bad.stdout + bad.stderr, "KEPT")


def _wheel_module(tmp_path: Path, held: dict[str, Any] | None) -> ModuleType:
    """python/sgl_kernel/fa3_variants.py from 0010, beside the JSON a pruned build installs (or none)."""
    pkg = tmp_path / ("pruned" if held else "full")
    pkg.mkdir()
    (pkg / "fa3_variants.py").write_text(_new_file("python/sgl_kernel/fa3_variants.py"))
    if held:
        (pkg / "flash_ops_variants.json").write_text(json.dumps(held))
    spec = importlib.util.spec_from_file_location(f"fa3_variants_{pkg.name}", pkg / "fa3_variants.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_wheel_raises_one_line_for_a_call_needing_a_kernel_left_out(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    mod = _wheel_module(tmp_path, {"head_dims": ["256"], "dtypes": ["bf16"], "softcap": False})

    def q(d: int, dtype: Any = torch.bfloat16) -> Any:
        return torch.empty(1, 1, 2, d, dtype=dtype)

    mod.check(q(128), q(128), 0.0)  # a narrower head runs the 256 kernel, as upstream rounds up
    for call, needs in ((lambda: mod.check(q(128, torch.float16), q(128, torch.float16), 0.0), "dtype fp16"),
                        (lambda: mod.check(q(64), q(512), 0.0), "head dims 64_512 (Q/K 64, V 512)"),
                        (lambda: mod.check(q(128), q(128), 15.0), "softcap")):
        with pytest.raises(NotImplementedError) as info:
            call()
        message = str(info.value)
        assert "\n" not in message and needs in message and "SGL_KERNEL_FA3_HDIMS" in message
        assert "holds head dims 256, dtypes bf16, softcap off" in message
    full = _wheel_module(tmp_path, None)
    full.check(q(64, torch.float16), q(512, torch.float16), 15.0)  # a full build checks nothing


def test_the_wheel_and_the_tool_agree_on_which_kernel_a_call_runs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    mod = _wheel_module(tmp_path, {"head_dims": list(fa3_variants.HEAD_DIMS), "dtypes": ["bf16"], "softcap": True})
    plain = ["64", "96", "128", "192", "256"]
    for d in range(8, 272, 8):
        for dv in (d, 64, 128, 256, 512):
            assert mod.kernel_head_dim(d, dv, plain) == fa3_variants.kernel_head_dim(d, dv), (d, dv)


def test_an_expectation_message_on_an_uncollectable_file_is_refused(tmp_path: Path) -> None:
    # A message names a failure's or a skip's reason (issue 70: a skip is explained by its reason); a file that
    # cannot be collected has neither.
    bad = _overlay(tmp_path, '[test.expect."x.py"]\noutcome = "uncollectable"\nreason = "r"\nmessage = "m"\n')
    with pytest.raises(RecipeError) as info:
        load(str(bad))
    assert any('test.expect."x.py".message' in line and 'applies to outcome = "fail" or "skip"' in line
               for line in info.value.problems), info.value.problems
