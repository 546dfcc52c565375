"""Whether a child forked while another thread holds a module's lock can take it."""

import os
import threading
import warnings


def free_in_a_forked_child(module, name):
    """Forks while a thread holds ``module.<name>``; the child tries to take it for 10 s."""
    held, release = threading.Event(), threading.Event()

    def hold():
        with getattr(module, name):
            held.set()
            release.wait(timeout=60)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(timeout=60)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads running
            pid = os.fork()
        if pid == 0:
            os._exit(0 if getattr(module, name).acquire(timeout=10) else 1)
    finally:
        release.set()
        holder.join(timeout=60)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0
