"""Exit registration survives a session collected while it registers another (issue 36's fault suite found it).

``capture._exit.register`` took a plain lock, and the weak reference of a session dropped by then runs its callback,
which takes the same lock, in whichever thread is collecting: a collection that happened inside ``register`` (any
allocation can start one) hung that thread for good, and every thread making a session after it."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_session_collected_under_the_registration_lock_does_not_hang():
    script = textwrap.dedent("""
        import gc
        from contextjudge.capture import _exit

        class Session:
            def at_exit(self):
                pass

        s = Session()
        s.cycle = s  # only the cyclic collector frees it: its callback runs inside a collection
        _exit.register(s.at_exit)
        del s
        with _exit._lock:  # what register holds while it allocates; a collection starting here runs the callback
            gc.collect()
        t = Session()
        _exit.register(t.at_exit)
        assert len(_exit._hooks) == 1
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
