"""Where a service's CPU went: py-spy's raw stacks (``py-spy record -f raw --subprocesses
--threads``), summed per process and thread, with each thread's heaviest functions.

    python -m bench.serve.stacks pyspy-runtime.txt --rate 100 --seconds 20 [--top 12]

A raw line is ``process P:"cmd";[process C:"cmd";]thread (T): name;frame;...;frame COUNT``,
outermost frame first. A thread's samples over ``rate * seconds`` is the share of the window it
was on a CPU (py-spy leaves idle threads out): 1.0 is a full core. Functions are keyed without
their line number, so one function's lines add up; "inclusive" counts a sample once for every
function on its stack, "self" only for the innermost one.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_LINE_NO = re.compile(r":\d+\)$")
QUOTE = '"'


@dataclass
class ThreadStacks:
    process: str
    thread: str
    samples: int = 0
    inclusive: Counter[str] = field(default_factory=Counter)
    own: Counter[str] = field(default_factory=Counter)


def _function(frame: str) -> str:
    return _LINE_NO.sub(")", frame)


def parse(text: str) -> dict[tuple[str, str], ThreadStacks]:
    threads: dict[tuple[str, str], ThreadStacks] = {}
    for raw in text.splitlines():
        match = _LINE.match(raw.strip())
        if not match:
            continue
        count = int(match["count"])
        process, thread, frames = "?", "?", []
        for frame in match["stack"].split(";"):
            if frame.startswith("process "):
                pid, _, command = frame.removeprefix("process ").partition(":")
                process = f"{pid} {command.strip(QUOTE)[:80]}".strip()
            elif frame.startswith("thread ("):
                thread = frame
            else:
                frames.append(_function(frame))
        entry = threads.setdefault((process, thread), ThreadStacks(process, thread))
        entry.samples += count
        for function in set(frames):
            entry.inclusive[function] += count
        if frames:
            entry.own[frames[-1]] += count
    return threads


def report(threads: dict[tuple[str, str], ThreadStacks], window: float, top: int) -> str:
    """Markdown: every thread by its share of the window, busiest first, with its top functions."""
    lines = ["| process | thread | cores |", "|---|---|---|"]
    ranked = sorted(threads.values(), key=lambda t: t.samples, reverse=True)
    for t in ranked:
        lines.append(f"| {t.process} | {t.thread} | {t.samples / window:.2f} |")
    for t in ranked:
        if t.samples / window < 0.05:
            break
        lines += ["", f"### {t.process} / {t.thread}: {t.samples / window:.2f} cores", "",
                  "| inclusive | function | self |", "|---|---|---|"]  # fmt: skip
        for function, count in t.inclusive.most_common(top):
            own = t.own[function] / t.samples
            lines.append(f"| {count / t.samples:.0%} | `{function}` | {own:.0%} |")
        lines += ["", "Most self time:", ""]
        for function, count in t.own.most_common(top):
            lines.append(f"* {count / t.samples:.0%} `{function}`")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serve.stacks")
    parser.add_argument("raw", type=Path, nargs="+", help="py-spy record -f raw output")
    parser.add_argument("--rate", type=float, default=100, help="py-spy's samples per second")
    parser.add_argument("--seconds", type=float, required=True, help="how long it recorded")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    for path in args.raw:
        print(f"## {path.name}\n")
        print(report(parse(path.read_text()), args.rate * args.seconds, args.top))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
