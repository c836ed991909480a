"""Code run in a child interpreter under limits: a hostile input's runaway allocation,
crash or hang fails its test, not the run."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap

#: What a child may take unless a test says otherwise.
MEMORY = 1 << 30
TIMEOUT = 60


def run_limited(
    code: str, *, memory: int = MEMORY, file_size: int | None = None, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run *code* (dedented) in a fresh interpreter under an address-space limit (and a
    file-size one: a write past it fails with EFBIG) and a timeout."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    # The parent's path: the child imports jsonbudget (and tests) as the parent does.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def bounded_run(code: str, *, memory: int = MEMORY, timeout: float = TIMEOUT) -> str:
    """`run_limited`, which must succeed; its stdout."""
    done = run_limited(code, memory=memory, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
