"""Builds libgdn_torch.so with the project's CMake and puts it into the gdn_kernels package.

Environment:
  CMAKE_ARGS       extra CMake arguments, e.g. "-DGDN_ENABLE_CUDA=OFF" or
                   "-DCMAKE_CUDA_ARCHITECTURES=90"
  GDN_BUILD_JOBS   parallel build jobs (default: the CPU count)
The CMake build lives in the folder cmake of setuptools' build_temp (build-pip/temp.*/cmake).
"""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
EXTENSION = "gdn_kernels.libgdn_torch"


class CMakeBuild(build_ext):
    def get_ext_filename(self, ext_name):
        # Loaded with torch.ops.load_library, not imported: no Python ABI suffix. distutils asks
        # with the last name component, setuptools with the full dotted name.
        if ext_name == EXTENSION:
            return os.path.join("gdn_kernels", "libgdn_torch.so")
        if ext_name == EXTENSION.rsplit(".", 1)[1]:
            return "libgdn_torch.so"
        return super().get_ext_filename(ext_name)

    def build_extension(self, ext):
        build_dir = Path(self.build_temp).resolve() / "cmake"
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
            "-DGDN_BUILD_TORCH=ON", f"-DGDN_TORCH_PYTHON={sys.executable}",
            "-DGDN_BUILD_TESTS=OFF",  # the extension needs no test framework (when the option exists)
        ]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        jobs = os.environ.get("GDN_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "gdn_torch", "-j", jobs])
        dest = Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build_dir / "lib" / "libgdn_torch.so", dest)


setup(
    ext_modules=[Extension(EXTENSION, sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": "build-pip"}},
)
