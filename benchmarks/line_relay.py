"""The floor for any process in the middle: a relay that copies bytes both ways and parses nothing.

    python line_relay.py COMMAND [ARGS...]

It spawns COMMAND and copies stdin to the child's stdin and the child's stdout to stdout, as
they arrive (whole lines or not), until both ends close. Standard library only, so it starts
as fast as Python can; passthrough.py runs it as a same-run reference: the cost of one more
process hop, without JSON, MCP or an event loop.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

CHUNK = 1 << 16


def _copy(source: int, target: int) -> None:
    try:
        while data := os.read(source, CHUNK):
            view = memoryview(data)
            while view:
                view = view[os.write(target, view) :]
    except OSError:
        pass  # the other end went away: stop copying this way
    finally:
        os.close(target)


def main() -> int:
    child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    down = threading.Thread(target=_copy, args=(sys.stdin.fileno(), os.dup(child.stdin.fileno())), daemon=True)
    down.start()
    child.stdin.close()  # the thread holds its own copy of the descriptor
    _copy(child.stdout.fileno(), os.dup(sys.stdout.fileno()))
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
