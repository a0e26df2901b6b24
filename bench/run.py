#!/usr/bin/python3
"""`make bench`: runs every suite in bench/suites/ (or those named) and writes bench/results/."""
import argparse
import importlib.util
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", default="build", help="build folder (with the stoker binary)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median)")
    parser.add_argument("suites", nargs="*", help="suite names (default: all)")
    args = parser.parse_args()
    suite_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "suites")
    sys.path.insert(0, suite_dir)  # suites may share helpers (e.g. object_store.S3fsMount)
    names = args.suites or sorted(f[:-3] for f in os.listdir(suite_dir)
                                  if f.endswith(".py") and not f.startswith("_"))
    ctx = lib.Context(args.build, args.repeat)
    failed = []
    for name in names:
        spec = importlib.util.spec_from_file_location(name, os.path.join(suite_dir, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        lib.log(f"suite {name}")
        try:
            module.run(ctx)
        except Exception:  # one broken suite must not hide the others' results
            traceback.print_exc()
            failed.append(name)
    ctx.close()
    if failed:
        lib.log(f"FAILED suites: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
