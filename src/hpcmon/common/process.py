"""Child-process handling shared by the exporter's backends, the demo and the test servers."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_process(proc: subprocess.Popen, timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within ``timeout`` seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def exited(proc: subprocess.Popen) -> bool:
    """Whether the child has exited, without reaping it: while it is a zombie its pid, and so
    its process group id, cannot be reused, which keeps ``kill_group`` safe."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def kill_group(proc: subprocess.Popen, timeout: float = 2) -> None:
    """SIGKILL the process group of a child started with ``start_new_session=True`` (the child
    and every descendant that did not leave the group), then reap the child."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
