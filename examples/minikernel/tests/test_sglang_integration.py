"""Like upstream's tests that import sglang: collected only where sglang is installed."""

import sglang  # noqa: F401

import minikernel


def test_sglang_sees_the_kernel():
    assert minikernel.__version__
