"""Installs the `stoker` package assembled by the CMake build into a Python environment.

    make build                                   # builds build/python/stoker (extension + .py)
    /usr/bin/python3 -m pip install --no-build-isolation ./python

STOKER_BUILD_DIR selects another build folder (default: ../build next to this file). Only
setuptools from Debian is needed (no PyPI): the extension is compiled by CMake, not by setup.py.
"""
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("STOKER_BUILD_DIR", os.path.join(HERE, "..", "build"))


class BuildFromCMake(build_py):
    """Copies the CMake-built extension next to the pure-Python sources."""

    def run(self):
        super().run()
        built = glob.glob(os.path.join(BUILD, "python", "stoker", "_stoker*.so"))
        if not built:
            raise SystemExit(f"no stoker/_stoker*.so under {BUILD}/python: run `make build` first "
                             "(or set STOKER_BUILD_DIR to your build folder)")
        target = os.path.join(self.build_lib, "stoker")
        os.makedirs(target, exist_ok=True)
        shutil.copy2(built[0], target)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(
    name="stoker",
    version="0.1.0",
    description="Fast data ingestion for deep learning (Python binding)",
    packages=["stoker"],
    package_dir={"stoker": "stoker"},  # pip runs setup.py from this folder
    python_requires=">=3.9",
    cmdclass={"build_py": BuildFromCMake},
    distclass=BinaryDistribution,
    zip_safe=False,
)
