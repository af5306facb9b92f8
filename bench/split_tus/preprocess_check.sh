#!/usr/bin/env bash
# Preprocessor check of sm120 v10's 0011 (split heavy TUs): for each split TU, preprocess the original
# and every part for one arch (default sm_120a, pruned the way CMake prunes it: SGL_ARCH_SM12X=1), in
# nvcc's device pass and in its host pass, and print per file what it defines: the torch entry point,
# the non-template dispatchers, the explicit instantiations, the extern template declarations, and the
# dispatch templates its compiled functions call (the implicit instantiations that pull in the GEMM
# kernels). Then it checks, per pass: the entry point and each non-template dispatcher defined exactly
# once across the parts, and the union of the parts' instantiations equal to the original's.
# Preprocessing only (no cicc, no ptxas): seconds per file, no GPU; FRONTEND=1 adds the host front end
# (cudafe++, ~30 s a file). It proves the guards select what the notes say, not the SASS (that is `build-kernel prune-proof --across-tus` on a real build).
#
#   bench/split_tus/preprocess_check.sh TREE [CUTLASS_DIR]
#     TREE         sgl-kernel at 6ffc74ef with sm120 v10's patches applied, e.g. from an overlay recipe
#                  (extends = "nightly-cu130", [patches] version = "v10"):
#                  build-kernel patch worktree --recipe v10.toml /tmp/split56-wt  ->  TREE=/tmp/split56-wt/sgl-kernel
#     CUTLASS_DIR  a folder with cutlass's include/ and tools/util/include/ at the pin 57e3cfb4, e.g.
#                  git --git-dir=<cutlass mirror> archive 57e3cfb47a2d9e0d46eb6335c3dc411498efa198 include tools/util/include | tar x
#                  (default: TREE/../split56-deps/cutlass)
#   env: ARCH=120a (gencode), FAMILIES="SGL_ARCH_SM12X=1" (or "unpruned": no arch list, every family), PYTHON (a python with torch; default
#        .venv/bin/python of this repo), NVCC (default nvcc), CXX_STD=20, KEEP=DIR (keep the .ii files)
set -euo pipefail

TREE=$(cd "${1:?usage: bench/split_tus/preprocess_check.sh TREE [CUTLASS_DIR]}" && pwd)
CUTLASS=${2:-$TREE/../split56-deps/cutlass}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-$HERE/.venv/bin/python}
NVCC=${NVCC:-nvcc}
ARCH=${ARCH:-120a}
FAMILIES=${FAMILIES:-SGL_ARCH_SM12X=1}
CXX_STD=${CXX_STD:-20}
if [ -n "${KEEP:-}" ]; then OUT=$KEEP; mkdir -p "$OUT"; else OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT; fi

TORCH_INC=$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))' 2>/dev/null)
# torch's CUDA headers want cusparse.h & co.: the nvidia-* wheels' include folder, searched after the toolkit's
NV_INC=$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia", "cu13", "include"))' 2>/dev/null)
[ -d "$CUTLASS/include/cute" ] || { echo "no cutlass include/ in $CUTLASS" >&2; exit 2; }

defs=(-DNDEBUG "-DOPERATOR_NAMESPACE=sgl-kernel" -DFLASHINFER_ENABLE_F16 -DCUTE_USE_PACKED_TUPLE=1
      -DCUTLASS_ENABLE_TENSOR_CORE_MMA=1 -DCUTLASS_VERSIONS_GENERATED -DCUTLASS_TEST_LEVEL=0
      -DCUTLASS_TEST_ENABLE_CACHED_RESULTS=1 -DCUTLASS_DEBUG_TRACE_LEVEL=0 -DENABLE_NVFP4=1)
if [ "$FAMILIES" != unpruned ]; then  # as 0005's CMake defines them; "unpruned": every family (upstream's dispatch)
  defs+=(-DSGL_KERNEL_ARCH_PRUNED=1 "-DSGL_KERNEL_ARCHS=\"sm_$ARCH\"")
  for f in $FAMILIES; do defs+=("-D$f"); done
fi
incs=(-I"$TREE/include" -I"$TREE/csrc" -I"$CUTLASS/include" -I"$CUTLASS/tools/util/include"
      -I"$TORCH_INC" -I"$TORCH_INC/torch/csrc/api/include")
flags=(-x cu -std=c++$CXX_STD "-gencode=arch=compute_$ARCH,code=sm_$ARCH" --expt-relaxed-constexpr
       --expt-extended-lambda "${defs[@]}" "${incs[@]}")
[ -d "$NV_INC" ] && flags+=(-Xcompiler "-idirafter $NV_INC")

# device pass: nvcc -E preprocesses for the gencode (__CUDA_ARCH__ set); host pass: the host `gcc -E`
# command nvcc would run for `-c` (taken from --dryrun: no __CUDA_ARCH__).
pp() {  # pp SRC OUTBASE
  "$NVCC" -E "${flags[@]}" "$1" -o "$2.device.ii"
  local host
  host=$("$NVCC" -c "${flags[@]}" "$1" -o /dev/null --dryrun 2>&1 |
         sed -n 's/^#\$ //p' | grep -E '^(gcc|g\+\+|"?[^ ]*/(gcc|g\+\+|c\+\+)"?) ' | grep -v -- '-D__CUDA_ARCH__=' | grep -- ' -E ' | head -1)
  [ -n "$host" ] || { echo "no host preprocess command in nvcc --dryrun" >&2; exit 3; }
  host=$(printf '%s' "$host" | sed -E 's/ -o "?[^ "]+"? *$//')
  eval "$host -o '$2.host.ii'"
}

# FRONTEND=1: also run nvcc's host front end (gcc -E, then cudafe++, the EDG pass that parses and
# instantiates the host side) on each original and part: a semantic check of the guards (extern template
# after a use, a specialization declared after its instantiation, a missing declaration) without cicc.
frontend() {  # frontend SRC
  local tmp cmds t0 rc
  tmp=$(mktemp -d)
  cmds=$(TMPDIR=$tmp "$NVCC" -c "${flags[@]}" "$1" -o /dev/null --dryrun 2>&1 | sed -n 's/^#\$ //p' |
         grep -E '^(gcc|g\+\+|"?[^ ]*/(gcc|g\+\+|c\+\+)"?|cudafe\+\+) ' | grep -v -- '-D__CUDA_ARCH__=' | head -2)
  t0=$(date +%s)
  rc=0
  ( export PATH="$(dirname "$(command -v "$NVCC")"):$PATH" TMPDIR=$tmp
    while IFS= read -r c; do eval "$c" || exit $?; done <<<"$cmds" ) >"$tmp/log" 2>&1 || rc=$?
  echo "frontend $(basename "$1"): rc=$rc, $(( $(date +%s) - t0 )) s"
  [ $rc = 0 ] || { grep -m5 -i "error" "$tmp/log"; FRONTEND_FAILED=1; }
  rm -rf "$tmp"
}
FRONTEND_FAILED=0

tus="gemm/fp8_gemm_kernel gemm/fp8_blockwise_gemm_kernel gemm/nvfp4_scaled_mm_kernels"
for tu in $tus; do
  base=$(basename "$tu")
  pp "$TREE/csrc/$tu.cu" "$OUT/$base.orig"
  [ "${FRONTEND:-0}" = 1 ] && frontend "$TREE/csrc/$tu.cu"
  for part in "$TREE/csrc/${tu}"_part*.cu; do
    pp "$part" "$OUT/$(basename "$part" .cu)"
    [ "${FRONTEND:-0}" = 1 ] && frontend "$part"
  done
done
# for reference: nvfp4_blockwise_moe.cu, not split (one GEMM at 12.0a)
pp "$TREE/csrc/moe/nvfp4_blockwise_moe.cu" "$OUT/nvfp4_blockwise_moe.orig"

rc=0
"$PYTHON" - "$OUT" $tus <<'EOF' || rc=$?
import re, sys
from pathlib import Path

out = Path(sys.argv[1]); tus = [t.split("/")[-1] for t in sys.argv[2:]]
ENTRIES = {"fp8_scaled_mm", "fp8_blockwise_scaled_mm", "cutlass_scaled_fp4_mm_sm100a_sm120a", "cutlass_fp4_group_mm"}
DISPATCH = re.compile(r"\b(\w*dispatch\w*|cutlassFp4GemmDispatch|runGemm\w*|run_fp4_blockwise_scaled_group_mm_sm1\d\d"
                      r"|run_get_group_gemm_starts)\b")

def own_code(path):
    """The part of the preprocessed file that came from csrc/ (the TU itself), via line markers."""
    keep, lines = False, []
    for l in Path(path).read_text(errors="replace").splitlines():
        m = re.match(r'# \d+ "([^"]+)"', l)
        if m:
            keep = "/csrc/" in m.group(1) and "cutlass_extensions" not in m.group(1)
            continue
        if keep:
            lines.append(l)
    return "\n".join(lines)

def match_brace(s, i):  # s[i] == '{'
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "{": depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0: return j
    return len(s)

def norm(t):
    return re.sub(r"\s+", " ", t).replace("< ", "<").replace(" >", ">").strip()

def targs(s, i):  # s[i] == '<': the balanced template argument text
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "<": depth += 1
        elif s[j] == ">":
            depth -= 1
            if depth == 0: return s[i + 1:j], j
    return "", i

def analyse(path):
    code = own_code(path)
    r = {"entry": [], "defined": [], "explicit": [], "extern": [], "declared": [], "calls": set()}
    # explicit instantiations and extern templates
    for m in re.finditer(r"(extern\s+)?template\s+void\s+(\w+)\s*<", code):
        a, _ = targs(code, m.end() - 1)
        (r["extern"] if m.group(1) else r["explicit"]).append(f"{m.group(2)}<{norm(a)}>")
    # explicit specializations only declared here (another part defines them)
    for m in re.finditer(r"template\s*<\s*>\s*void\s+(\w+)\s*<([^<>]*)>\s*\([^{};]*\)\s*;", code):
        r["declared"].append(f"{m.group(1)}<{norm(m.group(2))}>")
    # top-level function definitions: name ( ... ) {   (depth-0 only)
    i, n = 0, len(code)
    roots = []
    while i < n:
        c = code[i]
        if c == "{":
            # find the header text of this block: back to the previous ; } or {
            k = max(code.rfind(";", 0, i), code.rfind("}", 0, i), code.rfind("{", 0, i))
            head = code[k + 1:i]
            end = match_brace(code, i)
            p = head.find("(")  # a function's parameter list: the first parenthesis of the header
            m = re.search(r"\b(\w+)\s*(<[^()<>]*(?:<[^()<>]*>[^()<>]*)*>)?\s*$", head[:p]) if p >= 0 else None
            m = m if m and re.search(r"\)\s*(const)?\s*$", head) else None
            is_tpl = re.search(r"\btemplate\s*<\s*\w", head) is not None
            if m and not is_tpl and m.group(1) not in ("if", "for", "while", "switch", "namespace", "struct", "class"):
                name = m.group(1) + (norm(m.group(2)) if m.group(2) else "")
                if m.group(1) in ENTRIES:
                    r["entry"].append(name)
                elif DISPATCH.search(m.group(1)):
                    r["defined"].append(name)
                roots.append(code[i:end])
            elif re.search(r"\bnamespace\b", head):
                i += 1; continue   # descend into namespaces
            i = end + 1
            continue
        i += 1
    bodies = "\n".join(roots)
    # template calls from the compiled (non-template) functions, and what explicit instantiations pull in
    for m in re.finditer(r"\b(\w+_dispatch\w*|cutlassFp4GemmDispatch|runGemm\w*|run_fp4_blockwise_scaled_group_mm_sm100)\s*<", bodies):
        a, _ = targs(bodies, m.end() - 1)
        r["calls"].add(f"{m.group(1)}<{norm(a)}>")
    for m in re.finditer(r"\b(cutlass_fp4_\w+_dispatch_sm120|run_fp4_blockwise_scaled_group_mm_sm120)\s*\(", bodies):
        r["calls"].add(m.group(1) + "()")
    r["calls"] -= set(r["extern"]) | set(r["declared"])
    return r

def show(label, r):
    print(f"  {label}")
    print(f"    entry point defined:      {', '.join(r['entry']) or '-'}")
    print(f"    dispatchers defined:      {', '.join(r['defined']) or '-'}")
    print(f"    explicit instantiations:  {len(r['explicit'])}" + "".join(f"\n      {x}" for x in r["explicit"]))
    print(f"    extern template decls:    {len(r['extern'])}" + "".join(f"\n      {x}" for x in r["extern"]))
    if r["declared"]:
        print(f"    specializations declared: {len(r['declared'])}" + "".join(f"\n      {x}" for x in r["declared"]))
    calls = sorted(r["calls"])
    print(f"    called from compiled code (implicit instantiations / calls): {len(calls)}" + "".join(f"\n      {x}" for x in calls))

def instantiated(r):  # what this file compiles: explicit instantiations + calls not declared extern + dispatchers
    return (set(r["explicit"]) | {c for c in r["calls"] if not c.endswith("()")} | set(r["defined"]))

ok = True
for p in ("device", "host"):
    print(f"===== {p} pass =====")
    for tu in tus:
        print(f"{tu}.cu")
        orig = analyse(out / f"{tu}.orig.{p}.ii"); show("original", orig)
        parts = sorted(out.glob(f"{tu}_part*.{p}.ii"))
        rs = []
        for f in parts:
            r = analyse(f); rs.append(r); show(f.name.split(".")[0], r)
        entries = [e for r in rs for e in r["entry"]]
        defined = [d for r in rs for d in r["defined"]]
        union = set().union(*(instantiated(r) for r in rs))
        want = instantiated(orig)
        checks = [
            ("entry point once", sorted(entries) == sorted(orig["entry"]) and len(entries) == len(set(entries))),
            ("dispatchers once", sorted(defined) == sorted(orig["defined"])),
            ("union == original", union == want),
            ("every extern/declared one is defined by a part", all(x in union for r in rs for x in r["extern"] + r["declared"])),
        ]
        for name, good in checks:
            ok &= good
            print(f"  CHECK {name}: {'ok' if good else 'FAILED'}")
        if union != want:
            print(f"    only in parts: {sorted(union - want)}\n    only in original: {sorted(want - union)}")
        print(f"  counts: original {len(want)}; " + "; ".join(
            f"{f.name.split('.')[0]} {len(instantiated(r))}" for f, r in zip(parts, rs)))
    f = out / f"nvfp4_blockwise_moe.orig.{p}.ii"
    print("nvfp4_blockwise_moe.cu (not split)")
    show("original", analyse(f))
print("ALL CHECKS OK" if ok else "SOME CHECKS FAILED")
sys.exit(0 if ok else 1)
EOF
[ "$FRONTEND_FAILED" = 0 ] || { echo "FRONTEND FAILED (see above)"; rc=1; }
exit $rc
