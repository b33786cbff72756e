"""A process that must not outlive another: file-work children their server, server workers their
supervisor (``labeldp labels|features serve --workers N``).

A process killed with SIGKILL cannot stop what it started, and what it started otherwise lives on: a
file-work child finishing work nobody waits for, a server worker answering on a port its restarted
supervisor then cannot bind ("Address already in use"). So each such process watches the one it
belongs to and acts (``on_exit``) the moment it is gone: through a pidfd, which becomes readable when
the process exits (Linux 5.3 and later), or by asking once a second where there is none.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def exit_with(pid: int, on_exit: Callable[[], None]) -> None:
    """Call ``on_exit`` (in a daemon thread) as soon as process ``pid`` has exited — at once if it
    already has."""

    def watch() -> None:
        try:
            ended = os.pidfd_open(pid)
        except ProcessLookupError:
            on_exit()
            return
        except (AttributeError, OSError):  # no pidfd here: ask once a second
            while alive(pid):
                threading.Event().wait(1.0)
            on_exit()
            return
        select.select([ended], [], [])
        on_exit()

    threading.Thread(target=watch, name=f"exit-with-{pid}", daemon=True).start()
