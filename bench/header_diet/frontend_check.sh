#!/usr/bin/env bash
# The header diet (series sm120 v13, 0012) compiles every arch family's host code, not only the asked ones':
# each dieted TU through nvcc's front end alone (`--cuda`: preprocessor and cudafe++, which checks every name and
# instantiates every host template) with build.ninja's own line, minus 0005's pruning defines
# (SGL_KERNEL_ARCH_PRUNED, SGL_ARCH_*), so the SM90 and SM100 branches that a 12.0a build leaves out are parsed
# too. A name the lean header lacks is an error here, without a 9.0a or 10.0a build.
#
#   CMAKE=<configured build>/cmake TREE=<v13 sgl-kernel folder> OUT=bench/header_diet/raw/<dir>/frontend \
#       bash bench/header_diet/frontend_check.sh
set -u
: "${CMAKE:?a configured build folder's cmake/}" "${TREE:?the patched sgl-kernel folder}" "${OUT:?where logs go}"
mkdir -p "$OUT"
TUS=${TUS:-"csrc/gemm/nvfp4_scaled_mm_kernels csrc/moe/nvfp4_blockwise_moe csrc/gemm/fp8_gemm_kernel csrc/gemm/fp8_blockwise_gemm_kernel"}
fail=0
for tu in $TUS; do
    name=$(basename "$tu")
    line=$(ninja -C "$CMAKE" -t commands "CMakeFiles/common_ops_sm100_build.dir/$tu.cu.o" | tail -1)
    line=${line#* -- }
    # drop the pruning defines, the dependency file, -c and -o: every family's branch is then compiled
    cmd=$(echo "$line" | sed -E 's/ -DSGL_KERNEL_ARCH_PRUNED=1//; s/ -DSGL_ARCH_[A-Z0-9]+=1//g; s/ -DSGL_KERNEL_ARCHS=\\"[^ ]*\\"//;
        s/ -MD -MT [^ ]+ -MF [^ ]+//; s/ -x cu -c [^ ]+ -o [^ ]+$//')
    nvcc=${cmd%% *}
    /usr/bin/time -f "%e %U %S %M" -o "$OUT/$name.time" nice -n "${NICE:-10}" $nvcc -I"$TREE/include" -I"$TREE/csrc" \
        ${cmd#* } --cuda -x cu "$TREE/$tu.cu" -o "$OUT/$name.cu.cpp.ii" > "$OUT/$name.log" 2>&1
    rc=$?
    rm -f "$OUT/$name.cu.cpp.ii"
    echo "$tu rc=$rc" | tee -a "$OUT/results.txt"
    [ $rc = 0 ] || fail=1
done
echo "$cmd" > "$OUT/command.txt"
exit $fail
