"""``nicoll regmap``: print a register-map output, or regenerate the generated files and
check they are fresh."""

import sys
from pathlib import Path

__all__ = ["regmap_command"]

_REPO_ROOT = Path(__file__).resolve().parents[2]


def regmap_command(args):
    from nicoll.hw.regmap import RDL_PATH, compile_rdl, emit_cheader, emit_markdown, emit_python, \
        generated_outputs, stale_outputs
    if args.write or args.check:
        stale = stale_outputs(_REPO_ROOT)
        if args.write:
            outputs = generated_outputs(_REPO_ROOT)
            for path in stale:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(outputs[path])
        for path in stale:
            print(f"{'wrote' if args.write else 'stale'}: {path.relative_to(_REPO_ROOT)}")
        if not stale:
            print("register-map outputs are up to date")
        return 1 if stale and args.check else 0
    if args.format == "rdl":
        sys.stdout.write(RDL_PATH.read_text())
        return 0
    regmap, root = compile_rdl()
    emit = {"md": lambda: emit_markdown(root), "h": lambda: emit_cheader(root),
            "py": lambda: emit_python(regmap)}[args.format]
    sys.stdout.write(emit())
    return 0
