"""``python -m speculab.native [-v]``: build the kernels for this machine (``make setup`` runs it)."""

import sys

from speculab.native import build, build_dir, disabled_reason


def main() -> None:
    reason = disabled_reason()
    if reason:
        print(f"[speculab] native kernels not built: {reason}; the PyTorch path is used.")
        return
    build(verbose="-v" in sys.argv)
    print(f"[speculab] native kernels built in {build_dir()}")


if __name__ == "__main__":
    main()
