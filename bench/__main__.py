"""``python -m bench`` (also ``inferscale bench``): ``serve`` (through a running API),
``fairness`` (the noisy-neighbour benchmark), ``canary`` (the fidelity canary's margin),
``capacity`` (the pool's capacity model), ``floors`` (what a chat's hops and round trips cost
alone), ``inject`` (the fused injection kernel's bandwidth), ``redis-outage`` (what the API's
Redis calls cost a request while Redis is unreachable),
anything else the runtime benchmarks' own parser."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["serve"]:
        from bench.serve.__main__ import main as serve

        return serve(given[1:])
    if given[:1] == ["fairness"]:
        from bench.serve.fairness_cli import main as fairness

        return fairness(given[1:])
    if given[:1] == ["floors"]:
        from bench.serve.floors import main as floors

        return floors(given[1:])
    if given[:1] == ["canary"]:
        from bench.runtime.canary_margin import main as canary

        return canary(given[1:])
    if given[:1] == ["inject"]:
        from bench.runtime.inject import main as inject

        return inject(given[1:])
    if given[:1] == ["redis-outage"]:
        from bench.serve.redis_outage import main as redis_outage

        return redis_outage(given[1:])
    if given[:1] == ["capacity"]:
        from bench.capacity.__main__ import main as capacity

        return capacity(given[1:])
    from bench.runtime.cli import main as runtime

    return runtime(given)


if __name__ == "__main__":
    raise SystemExit(main())
