"""Build gostore: Python package + Go-built native parts.

``pip install .`` runs the custom ``build_ext`` below, which uses the Go
toolchain (``go`` on PATH, or ``$GO``) to build, from this directory:

* ``libgostore.so`` (``go build -buildmode=c-shared ./bindings``) and its
  header ``gostore.h``, loaded by ``gostore._native`` through ctypes;
* ``bin/gostore-master`` (``./gostore/master/cmd/gostore-master``), exec'd by
  the ``gostore-master`` console script.

Both land inside the ``gostore`` package of the build (or, with
``python setup.py build_ext --inplace``, in ``python/gostore/``).
``-ldflags=-checklinkname=0`` is required by giouring on Go >= 1.23.
"""

import os
import shutil
import subprocess
import sys

from setuptools import Distribution, find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
GO_FLAGS = ["-trimpath", "-ldflags=-checklinkname=0"]


class BinaryDistribution(Distribution):
    """Always platform-specific: the package ships a native library."""

    def has_ext_modules(self):
        return True


class GoBuildExt(build_ext):
    """Build the Go c-shared library and the master binary into the package."""

    description = "build libgostore.so and gostore-master with the Go toolchain"

    def _out_dir(self):
        if self.inplace or getattr(self, "editable_mode", False):
            return os.path.join(ROOT, "python", "gostore")
        return os.path.join(os.path.abspath(self.build_lib), "gostore")

    def _go(self):
        go = os.environ.get("GO") or shutil.which("go")
        if not go:
            for cand in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go"):
                if os.access(cand, os.X_OK):
                    go = cand
                    break
        if not go:
            raise SystemExit(
                "error: building gostore needs the Go toolchain (>= the version in "
                "go.mod), but `go` was not found on PATH. Install Go "
                "(https://go.dev/dl/) or set GO=/path/to/go, then retry."
            )
        return go

    def _run(self, cmd):
        print("gostore build: " + " ".join(cmd), flush=True)
        env = dict(os.environ)
        env.setdefault("CGO_ENABLED", "1")  # c-shared needs cgo
        # go-nvml's generated cgo calls deprecated NVML functions: quiet.
        env.setdefault("CGO_CFLAGS", "-O2 -g -Wno-deprecated-declarations")
        try:
            subprocess.run(cmd, cwd=ROOT, env=env, check=True)
        except subprocess.CalledProcessError as e:
            raise SystemExit(f"error: Go build failed (exit {e.returncode}): {' '.join(cmd)}")

    def run(self):
        go = self._go()
        out = self._out_dir()
        os.makedirs(os.path.join(out, "bin"), exist_ok=True)
        lib = os.path.join(out, "libgostore.so")
        self._run([go, "build", "-buildmode=c-shared", *GO_FLAGS, "-o", lib, "./bindings"])
        # cgo writes the header next to the library as libgostore.h.
        hdr = os.path.join(out, "libgostore.h")
        if os.path.exists(hdr):
            os.replace(hdr, os.path.join(out, "gostore.h"))
        master = os.path.join(out, "bin", "gostore-master")
        # --version prints the package's version, stamped in here.
        ldflags = f"-ldflags=-checklinkname=0 -X main.packageVersion={self.distribution.get_version()}"
        self._run([go, "build", "-trimpath", ldflags, "-o", master, "./gostore/master/cmd/gostore-master"])
        self._outputs = [lib, os.path.join(out, "gostore.h"), master]

    def get_outputs(self):
        out = self._out_dir()
        return [
            os.path.join(out, "libgostore.so"),
            os.path.join(out, "gostore.h"),
            os.path.join(out, "bin", "gostore-master"),
        ]

    def get_output_mapping(self):  # editable installs: nothing to copy back
        return {}

    def get_source_files(self):
        files = ["go.mod", "go.sum"]
        for top in ("bindings", "gostore"):
            for d, _dirs, names in os.walk(os.path.join(ROOT, top)):
                files += [
                    os.path.relpath(os.path.join(d, n), ROOT) for n in names if n.endswith(".go")
                ]
        return files


# The opt-in hook that lets GOSTORE_AS_MOONCAKE=1 make ``mooncake.store``
# resolve to gostore in every process (gostore/mooncake_alias.py): a .pth
# file at the root of site-packages, which does nothing without the variable.
ALIAS_PTH = "gostore-mooncake-alias.pth"


class BuildPyWithAliasHook(build_py):
    """build_py, plus the alias hook's .pth at the root of the build."""

    def run(self):
        # A module moved or removed in the sources must not linger in the
        # build folder of an earlier build: it would ship in the wheel
        # (gostore/store.py beside gostore/store/). The Go outputs there are
        # rebuilt by build_ext, which runs after this.
        for d, _dirs, names in os.walk(os.path.join(self.build_lib, "gostore")):
            for n in names:
                if n.endswith((".py", ".pyc")):
                    os.remove(os.path.join(d, n))
        super().run()
        self.copy_file(os.path.join(ROOT, "python", ALIAS_PTH), os.path.join(self.build_lib, ALIAS_PTH),
                       preserve_mode=0)

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, ALIAS_PTH)]


cmdclass = {"build_ext": GoBuildExt, "build_py": BuildPyWithAliasHook}

# The library is loaded with ctypes, not imported as a CPython extension, so
# the wheel works with any Python 3 on this platform: tag it py3-none-<plat>.
try:
    try:
        from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
    except ImportError:
        from wheel.bdist_wheel import bdist_wheel as _bdist_wheel

    class bdist_wheel(_bdist_wheel):
        def get_tag(self):
            _py, _abi, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = bdist_wheel
except ImportError:  # no wheel support installed: setuptools' defaults
    pass

setup(
    package_dir={"": "python"},
    packages=find_packages("python", include=["gostore", "gostore.*"]),
    package_data={"gostore": ["libgostore.so", "gostore.h", "bin/gostore-master"]},
    include_package_data=False,
    cmdclass=cmdclass,
    distclass=BinaryDistribution,
    zip_safe=False,
)
