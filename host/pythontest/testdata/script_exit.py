"""How the test scripts end: without the interpreter's teardown.

At exit, Python's garbage collector runs the __del__ of grpc channels the
Beam client left open; grpcio 1.85 can deadlock there on a lock its own
threads hold (seen once in CI: the job had ended DONE, the client hung until
the Go test's timeout). The scripts have printed and written all they need
by then, so they flush and leave at once."""

import os
import sys


def exit_now(code):
    """Flushes stdout and stderr and ends the process with code, skipping
    atexit handlers and finalizers."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
