"""Running one function in several threads at once."""

import threading


def in_threads(target, count):
    """``target(i)`` in its own thread for each ``i`` below ``count``; returns once all ended."""
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
