"""minicppext: a miniature of flash-attn's build (setuptools + torch.utils.cpp_extension + ninja).

Shaped like flash-attn 2.8.3's setup.py where build-kernel has to drive it:
- archs come from its own variable, MINICPPEXT_CUDA_ARCHS (`80;90;100;120` style), as one
  `-gencode` per arch in the nvcc flags (so torch's TORCH_CUDA_ARCH_LIST is ignored);
- its own job rule when MAX_JOBS is unset: min(cpus / 2, free GB / 9), from host memory;
- NVCC_THREADS (default 4) becomes nvcc's --threads;
- the version is `__version__` of minicppext/__init__.py (+ MINICPPEXT_LOCAL_VERSION);
- bdist_wheel would fetch a prebuilt wheel unless MINICPPEXT_FORCE_BUILD=TRUE (here it stops
  instead: the miniature has nowhere to download from, and the build must never try).
"""

import os
import re
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent


def version():
    text = (HERE / "minicppext" / "__init__.py").read_text()
    public = re.search(r'^__version__\s*=\s*"([^"]+)"', text, re.M).group(1)
    local = os.environ.get("MINICPPEXT_LOCAL_VERSION")
    return f"{public}+{local}" if local else public


def gencodes():
    archs = [a for a in os.environ.get("MINICPPEXT_CUDA_ARCHS", "80;90;100;120").split(";") if a]
    return [flag for a in archs for flag in ("-gencode", f"arch=compute_{a},code=sm_{a}")]


class PrebuiltOrBuild(bdist_wheel):
    def run(self):
        if os.environ.get("MINICPPEXT_FORCE_BUILD", "FALSE") != "TRUE":
            raise SystemExit("minicppext: would download a prebuilt wheel now (set MINICPPEXT_FORCE_BUILD=TRUE)")
        super().run()


class NinjaBuild(BuildExtension):
    def __init__(self, *args, **kwargs):
        if not os.environ.get("MAX_JOBS"):  # flash-attn's rule, from host memory
            import psutil

            by_cpu = max(1, (os.cpu_count() or 2) // 2)
            by_mem = max(1, int(psutil.virtual_memory().available / 1024**3 / 9))
            os.environ["MAX_JOBS"] = str(min(by_cpu, by_mem))
            print(f"minicppext: MAX_JOBS unset, using {os.environ['MAX_JOBS']}")
        super().__init__(*args, **kwargs)


setup(
    name="minicppext",
    version=version(),
    packages=["minicppext"],
    ext_modules=[CUDAExtension(
        "minicppext._C", ["csrc/scale.cu"],
        extra_compile_args={"cxx": ["-O2"],
                            "nvcc": ["-O2", "--threads", os.environ.get("NVCC_THREADS", "4"), *gencodes()]})],
    cmdclass={"bdist_wheel": PrebuiltOrBuild, "build_ext": NinjaBuild},
    python_requires=">=3.9",
)
