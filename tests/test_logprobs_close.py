"""bench/serving/logprobs_close.py: vLLM's check_logprobs_close rule on constructed greedy outputs, and the
sglang /generate reply it reads the server's top logprobs from (token_agreement.parse_generate_response)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from tests.conftest import REPO_ROOT


def _bench(name: str) -> ModuleType:
    sys.path.insert(0, str(REPO_ROOT / "bench" / "serving"))  # the bench scripts import their siblings by name
    try:
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "bench" / "serving" / f"{name}.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(REPO_ROOT / "bench" / "serving"))


@pytest.fixture(scope="module")
def lc() -> ModuleType:
    return _bench("logprobs_close")


def _top(*pairs: tuple[int, float]) -> dict[int, float]:
    return dict(pairs)


def test_identical_ids_pass_and_count_as_exact(lc: ModuleType) -> None:
    top = [_top((7, -0.1), (3, -2.5))] * 3
    v = lc.check(lc.Output([7, 7, 7], top), lc.Output([7, 7, 7], top), prompt=4)
    assert (v.passed, v.identical, v.first_divergence, v.reason) == (True, True, None, "")


def test_a_near_tie_broken_differently_passes_and_is_reported(lc: ModuleType) -> None:
    hf = lc.Output([5, 9, 1], [_top((5, -0.1)), _top((9, -0.69), (4, -0.70)), _top((1, -0.2))])
    srv = lc.Output([5, 4, 8], [_top((5, -0.1)), _top((4, -0.68), (9, -0.71)), _top((8, -0.3))])
    v = lc.check(hf, srv, names=("transformers", "sglang"))
    assert v.passed and not v.identical
    assert (v.first_divergence, v.tokens) == (1, (9, 4))
    assert (v.a_token_rank_in_b, v.b_token_rank_in_a) == (2, 2)
    assert (v.a_token_logprob_in_b, v.b_token_logprob_in_a) == (-0.71, -0.70)
    # After the divergence the walk stops: step 2's tokens (1 vs 8, each outside the other's list) are not judged.


def test_a_token_outside_the_other_sides_top_k_fails_naming_it(lc: ModuleType) -> None:
    five = _top((9, -0.01), (10, -5.0), (11, -6.0), (12, -7.0), (13, -8.0))
    hf = lc.Output([2, 9], [_top((2, -0.1)), five])
    srv = lc.Output([2, 77], [_top((2, -0.1)), _top((77, -0.2), (9, -1.8))])
    v = lc.check(hf, srv, names=("transformers", "sglang"))
    assert not v.passed and v.first_divergence == 1 and v.tokens == (9, 77)
    assert v.a_token_rank_in_b == 2 and v.b_token_rank_in_a is None
    assert v.reason == "step 1: sglang's token 77 is not in transformers's top 5"
    # k counts: with k=1 even the other side's runner-up is too far.
    assert lc.check(hf, srv, k=1).reason.startswith("step 1: a's token 9 is not in b's top 1")


def test_a_missing_top_list_at_the_divergence_fails(lc: ModuleType) -> None:
    v = lc.check(lc.Output([1, 2], [_top((1, 0.0)), _top((2, 0.0))]), lc.Output([1, 3], [_top((1, 0.0))]))
    assert not v.passed and v.reason == "no top logprobs at step 1"


def test_the_run_verdict_holds_the_pass_fraction_and_keeps_the_exact_id_figure(lc: ModuleType) -> None:
    ok = lc.Verdict(0, passed=True, identical=True)
    tie = lc.Verdict(1, passed=True, identical=False, first_divergence=7)
    bad = lc.Verdict(2, passed=False, identical=False, first_divergence=3)
    exact = lc.summarize([ok, tie, bad])
    assert (exact.prompts, exact.passed, exact.identical, exact.verdict) == (3, 2, 1, "fail")
    assert exact.failed_prompts == [2] and exact.first_divergence_steps == [3, 7]
    nine_of_ten = [ok] * 9 + [bad]
    assert lc.summarize(nine_of_ten, min_pass_fraction=lc.FP8_MIN_PASS_FRACTION).verdict == "pass"
    assert lc.summarize([ok] * 8 + [bad] * 2, min_pass_fraction=lc.FP8_MIN_PASS_FRACTION).verdict == "fail"
    assert lc.summarize([]).verdict == "fail"  # nothing compared proves nothing


def test_the_servers_top_logprobs_are_read_per_step(lc: ModuleType) -> None:
    ta = _bench("token_agreement")
    reply = {"text": " Paris", "output_ids": [11, 12],
             "meta_info": {"output_token_logprobs": [[-0.1, 11, None], [-0.3, 12, None]],
                           "output_top_logprobs": [[[-0.1, 11, None], [-2.4, 40, None]],
                                                   [[-0.3, 12, None], [-1.5, 41, None]]]}}
    out = ta.parse_generate_response(reply)
    assert out.tokens == [11, 12] and out.logprobs == [-0.1, -0.3]
    assert out.top == [{11: -0.1, 40: -2.4}, {12: -0.3, 41: -1.5}]
