"""Builds the `stoker` wheel: CMake compiles the C++ tree, setuptools packages the result.

    python3 -m venv --system-site-packages v && v/bin/pip install --no-build-isolation .

What the wheel holds: the `stoker` package (python/stoker/*.py and the extension stoker._stoker),
the `stoker` command (installed into the environment's bin/, so it is on PATH in an activated
venv), and stoker/system-libraries.txt (the shared libraries both link and, on Debian, the packages
that provide them). Debug information is stripped from the installed copies.

The CMake build folder is `build/` (the one `make build` uses, so an install after `make build`
only packages) unless STOKER_BUILD_DIR names another. Compiles go through ccache when it is
installed, with CCACHE_BASEDIR set to this folder, so a fresh clone or an unpacked sdist reuses
the objects of any other checkout. STOKER_JOBS sets the parallel compile jobs (default: all CPUs).
"""
import os
import re
import shutil
import subprocess
import sys

from setuptools import Command, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(os.environ.get("STOKER_BUILD_DIR", os.path.join(ROOT, "build")))
# The `stoker` command, stripped, staged where data_files picks it up (relative to ROOT).
STAGED_BIN = os.path.join("build", "pip", "bin", "stoker")


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        match = re.search(r"project\(stoker\s+VERSION\s+([0-9.]+)", f.read())
    if not match:
        raise SystemExit("setup.py: no `project(stoker VERSION x.y.z ...)` in CMakeLists.txt")
    return match.group(1)


def run(command, **kwargs):
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, **kwargs)


def cmake_build():
    """Configures (once) and builds the targets the wheel needs; returns (extension, binary)."""
    env = dict(os.environ)
    # This folder, whatever the caller set: a basedir inherited from another checkout (make test
    # exports its own) would leave absolute paths in the cache keys, and every compile would miss.
    env["CCACHE_BASEDIR"] = ROOT
    env["CCACHE_NOHASHDIR"] = "1"
    for tool in ("cmake", "ninja"):
        if shutil.which(tool) is None:
            raise SystemExit(f"setup.py: `{tool}` is not installed; on Debian 12 run "
                             "`sudo bash scripts/install-deps.sh` (it installs every build "
                             "dependency), then retry")
    if not os.path.exists(os.path.join(BUILD, "build.ninja")):
        run(["cmake", "-S", ROOT, "-B", BUILD, "-G", "Ninja"], env=env)
    jobs = os.environ.get("STOKER_JOBS", str(os.cpu_count() or 2))
    run(["cmake", "--build", BUILD, "-j", jobs, "--target", "stoker", "stoker_python_sources"],
        env=env)
    package = os.path.join(BUILD, "python", "stoker")
    built = [f for f in os.listdir(package) if f.startswith("_stoker") and f.endswith(".so")]
    if not built:
        raise SystemExit(f"setup.py: the build made no {package}/_stoker*.so: CMake skips the "
                         "Python extension without /usr/bin/python3's headers or pybind11 "
                         "(python3-dev, pybind11-dev); see the CMake output above")
    return os.path.join(package, built[0]), os.path.join(BUILD, "stoker")


def copy_stripped(source, target):
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copy2(source, target)
    if shutil.which("strip"):
        subprocess.run(["strip", "--strip-debug", target], check=True)


def system_libraries(paths):
    """Lines "soname  path  debian-package" for the shared libraries `paths` load."""
    libraries = {}
    for path in paths:
        out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        for line in out.splitlines():
            match = re.match(r"\s*(\S+) => (\S+)", line)
            if match and match.group(2) != "not":
                libraries[match.group(1)] = os.path.realpath(match.group(2))
    lines = []
    for soname, path in sorted(libraries.items()):
        package = "?"
        if shutil.which("dpkg-query"):
            owner = subprocess.run(["dpkg-query", "-S", path], capture_output=True, text=True)
            if owner.returncode != 0:  # Debian records /lib paths for /usr/lib files (usrmerge)
                owner = subprocess.run(["dpkg-query", "-S", path.replace("/usr/lib/", "/lib/")],
                                       capture_output=True, text=True)
            if owner.returncode == 0:
                package = owner.stdout.split(":")[0]
        lines.append(f"{soname}  {path}  {package}")
    return lines


class BuildWithCMake(build_py):
    """build_py plus the CMake-built extension, the stripped `stoker` command and the list of
    system libraries they need."""

    def run(self):
        super().run()
        extension, binary = cmake_build()
        target = os.path.join(self.build_lib, "stoker")
        copy_stripped(extension, os.path.join(target, os.path.basename(extension)))
        copy_stripped(binary, os.path.join(ROOT, STAGED_BIN))
        with open(os.path.join(target, "system-libraries.txt"), "w", encoding="utf-8") as f:
            f.write("# Shared libraries stoker._stoker and the `stoker` command load: soname, path "
                    "on the build machine, Debian package.\n# Install them with "
                    "`apt-get install <packages>` (or scripts/install-deps.sh).\n")
            f.write("\n".join(system_libraries([extension, binary])) + "\n")


class SdistWithCommit(sdist):
    """sdist that records the git commit, so `stoker --version` names it when built from the
    unpacked archive (which has no .git)."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True)
        if commit.returncode == 0:
            with open(os.path.join(base_dir, ".stoker-commit"), "w", encoding="utf-8") as f:
                f.write(commit.stdout.strip() + "\n")


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


class CleanCMake(Command):
    """`setup.py clean_cmake`: removes the wheel staging folder (not the CMake build)."""
    user_options = []

    def initialize_options(self):
        pass

    def finalize_options(self):
        pass

    def run(self):
        shutil.rmtree(os.path.join(ROOT, "build", "pip"), ignore_errors=True)


if sys.version_info < (3, 9):
    raise SystemExit("stoker needs Python 3.9 or newer")

setup(
    version=project_version(),
    packages=["stoker"],
    package_dir={"stoker": "python/stoker"},
    data_files=[("bin", [STAGED_BIN])],
    cmdclass={"build_py": BuildWithCMake, "sdist": SdistWithCommit, "clean_cmake": CleanCMake},
    distclass=BinaryDistribution,
    options={"build": {"build_base": os.path.join("build", "pip")}},
    zip_safe=False,
)
