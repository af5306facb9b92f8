"""The recipe's library rules follow the asked archs (no wheel needed: the rules of the shipped recipes).

Seen: `--arch 9.0a` on the nightly recipes built, then verify failed with "no library matching
sgl_kernel/sm100/common_ops* holds device code: the FP4 kernels are missing", even with fp4 = false: a
cc 9.0 GPU loads sgl_kernel/sm90/common_ops, and nothing asked loads the sm100 one."""

from __future__ import annotations

import pytest

from build_kernel import recipe
from build_kernel.archs import parse_arch_list
from build_kernel.recipe import LibraryRule, Verify
from build_kernel.stages.verify import rules

SM100, SM90, FA3 = "sgl_kernel/sm100/common_ops*", "sgl_kernel/sm90/common_ops*", "sgl_kernel/flash_ops*"


@pytest.mark.parametrize("name", ["nightly-cu130", "nightly-cu130-pruned"])
def test_nightly_rules_for_9_0a_ask_nothing_of_the_sm100_library(name: str) -> None:
    spec = recipe.load(name).verify
    hopper = parse_arch_list("9.0a")
    applying = {r.glob for r in spec.libraries if rules.wanted(r, hopper) is not None}
    assert SM100 not in applying and {SM90, FA3} <= applying
    # What a 9.0a wheel holds: sm90/common_ops and FA3 with device code, sm100/common_ops pruned to none.
    assert rules.required_missing(spec, hopper, present={SM90, FA3}) == []


@pytest.mark.parametrize("name", ["nightly-cu130", "nightly-cu130-pruned"])
def test_nightly_rules_for_12_0a_still_require_sm100_and_its_fp4(name: str) -> None:
    spec = recipe.load(name).verify
    blackwell = parse_arch_list("12.0a")
    assert rules.required_missing(spec, blackwell, present=set()) == [
        f"no library matching {SM100} holds device code: the FP4 kernels are missing"]
    assert rules.required_missing(spec, parse_arch_list("9.0a;12.0a"), present={SM100}) == []


def test_required_fp4_names_fp4_only_where_an_asked_arch_has_fp4() -> None:
    spec = Verify(libraries=(LibraryRule(glob="lib/ops*", fp4=True, required=True),))
    # 8.0 has no FP4: the library is still required, its FP4 kernels are not.
    assert rules.required_missing(spec, parse_arch_list("8.0"), present=set()) == [
        "no library matching lib/ops* holds device code"]


def test_not_loaded_on_is_by_compute_capability() -> None:
    rule = LibraryRule(glob="x", required=True, not_loaded_on=("9.0",))
    assert rules.wanted(rule, parse_arch_list("9.0a")) is None
    assert rules.wanted(rule, parse_arch_list("9.0")) is None
    # Asked with others: it covers those that load it, not the cc 9.0 one (that GPU loads another library).
    assert rules.wanted(rule, parse_arch_list("9.0a;10.0a")) == parse_arch_list("10.0a")


@pytest.mark.parametrize(("name", "package"), [("nightly-cu130", "sgl_kernel"), ("nightly-cu130-pruned", "sgl_kernel"),
                                               ("demo", "minikernel")])
def test_a_hopper_and_blackwell_wheel_asks_each_library_for_the_archs_that_load_it(name: str, package: str) -> None:
    """Seen on the miniature built for 9.0a;12.0a: verify failed sm90/common_ops and flash_ops for lacking sm_120a
    and sm100/common_ops for lacking sm_90a, though no 12.0 GPU loads the first two and no 9.0 GPU the third."""
    spec = recipe.load(name).verify
    both = parse_arch_list("9.0a;12.0a")
    want = {r.glob: rules.wanted(r, both) for r in spec.libraries}
    assert want[f"{package}/sm90/common_ops*"] == parse_arch_list("9.0a")
    assert want[f"{package}/flash_ops*"] == parse_arch_list("9.0a")
    assert want[f"{package}/sm100/common_ops*"] == parse_arch_list("12.0a")


def test_when_asked_is_by_compute_capability_too() -> None:
    rule = LibraryRule(glob="x", when_asked=("9.0a", "10.0a"))
    assert rules.wanted(rule, parse_arch_list("9.0a;10.0a;12.0a")) == parse_arch_list("9.0a;10.0a")
    assert rules.wanted(rule, parse_arch_list("12.0a")) is None  # nothing asked loads it: only listed
