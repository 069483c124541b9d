"""A stalled bench fails with its stacks instead of hanging (``bench/serve/watchdog.py``), in a
real child process: the watchdog ends the process it runs in."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.databases import REPO


def _run(body: str) -> subprocess.CompletedProcess[str]:
    script = "from bench.serve import watchdog\nimport time\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_no_progress_for_the_limit_ends_the_process_with_every_threads_stack() -> None:
    done = _run("""
        def stuck_warm_up():
            time.sleep(60)

        watchdog.arm(0.5)
        stuck_warm_up()
        print("never")
    """)
    assert done.returncode == 1
    assert "never" not in done.stdout
    assert "Timeout" in done.stderr and "stuck_warm_up" in done.stderr  # where it stalled


def test_progress_in_time_and_disarm_let_a_slow_bench_finish() -> None:
    done = _run("""
        watchdog.arm(1.0)
        for _ in range(4):  # 2.4 s in all, never 1 s without progress
            time.sleep(0.6)
            watchdog.progress()
        watchdog.disarm()
        time.sleep(1.5)
        print("finished")
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "finished"
