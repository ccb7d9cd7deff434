"""The extension _memfit is the engine's CMake target memfit_py: built in the
repository's build folder (MEMFIT_BUILD, default ../build) and copied into
the package. The engine's defaults stay the repository's (datasets under
/usr/share/datasets, `make deps`'s files under deps/)."""
import glob
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if not os.path.exists(os.path.join(ROOT, "src", "cli", "run_args.cpp")):
            raise RuntimeError(f"memfit's sources are not at {ROOT}: pip must build python/ in place "
                               "(pip install ./python from the repository)")
        build = os.environ.get("MEMFIT_BUILD", os.path.join(ROOT, "build"))
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release"])
        jobs = os.environ.get("MEMFIT_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", build, "--target", "memfit_py", "-j", jobs])
        built = glob.glob(os.path.join(build, "python", "memfit", "_memfit*.so"))
        if not built:
            raise RuntimeError(f"CMake built no _memfit in {build}/python/memfit (is pybind11-dev installed?)")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


setup(ext_modules=[Extension("memfit._memfit", sources=[])], cmdclass={"build_ext": CMakeBuild})
