"""Runs *inside* the sandbox: set rlimits, close stray fds, then exec the user's program.

Usage: ``python -I -B launcher.py LIMITS_JSON PYTHON MAIN_PY``. Kept free of agentrl imports
(the sandbox sees only this file and the user's code). If a limit cannot be applied it exits
125 with a message naming the limit, and the user's code never runs.
"""

import json
import os
import resource
import sys


def main() -> None:
    limits = json.loads(sys.argv[1])
    python, program = sys.argv[2], sys.argv[3]
    try:
        for name, (soft, hard) in limits.items():
            resource.setrlimit(getattr(resource, name), (soft, hard))
    except (ValueError, OSError) as exc:
        sys.stderr.write(f"agentrl-launcher: cannot set {name}: {exc}\n")
        os._exit(125)
    os.closerange(3, 1 << 16)
    os.execv(python, [python, "-I", "-B", "-u", program])  # -u: output survives a kill


if __name__ == "__main__":
    main()
