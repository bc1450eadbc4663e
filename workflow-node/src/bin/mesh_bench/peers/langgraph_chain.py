"""The LangGraph peer of `mesh-bench chain`: the same 10-step chain of echo steps, run one
at a time on LangGraph with its SQLite checkpointer (a file on disk, one thread per run).

Prints the run latency and the per-step figure (run latency / 10, as `mesh-bench chain`
reports its per-node overhead) at p50 / p90 / p99, for each durability mode measured:
LangGraph's default (checkpoints written while the next step runs) and `sync` (each
checkpoint written before the next step, as the workflow node commits each step).
In-process: no network, no broker, one Python process.

Run it through langgraph_chain.sh, which makes the virtualenv.
"""

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from typing import TypedDict

STEPS = 10


class State(TypedDict, total=False):
    v: int
    step: int


def echo(i):
    def node(state: State) -> State:
        return {"step": i, "v": state["v"]}

    return node


def chain(checkpointer):
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(State)
    for i in range(STEPS):
        g.add_node(f"n{i}", echo(i))
    g.add_edge(START, "n0")
    for i in range(1, STEPS):
        g.add_edge(f"n{i - 1}", f"n{i}")
    g.add_edge(f"n{STEPS - 1}", END)
    return g.compile(checkpointer=checkpointer)


def pct(sorted_v, p):
    rank = round(p / 100 * (len(sorted_v) - 1))
    return sorted_v[min(rank, len(sorted_v) - 1)]


def us(x):
    return f"{x / 1e3:.1f} ms" if x >= 10_000 else f"{x:.0f} µs"


def measure(graph, runs, warmup, durability, limit_s):
    kwargs = {} if durability is None else {"durability": durability}
    lat = []
    deadline = time.monotonic() + limit_s
    for r in range(warmup + runs):
        if time.monotonic() > deadline:
            break
        config = {"configurable": {"thread_id": f"{durability}-{r}"}}
        t0 = time.perf_counter()
        out = graph.invoke({"v": 1}, config, **kwargs)
        dt = (time.perf_counter() - t0) * 1e6
        if out.get("step") != STEPS - 1:
            sys.exit(f"error: a run ended with {out!r}")
        if r >= warmup:
            lat.append(dt)
    lat.sort()
    per = sorted(x / STEPS for x in lat)
    return {
        "runs": len(lat),
        "run_latency_p50_us": round(pct(lat, 50), 1),
        "per_step_p50_us": round(pct(per, 50), 1),
        "per_step_p90_us": round(pct(per, 90), 1),
        "per_step_p99_us": round(pct(per, 99), 1),
        "per_step_mean_us": round(statistics.fmean(per), 1),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--json", help="write the figures here as JSON")
    ap.add_argument("--db-dir", help="directory for the SQLite file (default: a temp dir)")
    a = ap.parse_args()
    if a.runs < 1:
        sys.exit(f"error: --runs must be at least 1, not {a.runs}")
    if a.warmup < 0:
        sys.exit(f"error: --warmup must be at least 0, not {a.warmup}")

    # Imported only now: --help and bad arguments need no virtualenv.
    from langgraph.checkpoint.sqlite import SqliteSaver

    try:
        from importlib.metadata import version

        lg_version = version("langgraph")
        saver_version = version("langgraph-checkpoint-sqlite")
    except Exception:  # noqa: BLE001 - versions are informative only
        lg_version = saver_version = "?"

    with tempfile.TemporaryDirectory(dir=a.db_dir) as d:
        db = os.path.join(d, "checkpoints.sqlite")
        conn = sqlite3.connect(db, check_same_thread=False)
        graph = chain(SqliteSaver(conn))
        modes = {}
        for mode in (None, "sync"):
            name = "default" if mode is None else mode
            try:
                modes[name] = measure(graph, a.runs, a.warmup, mode, 120)
            except TypeError:
                # A LangGraph without the durability argument (before 0.6).
                modes[name] = None
        conn.close()

    print(
        f"langgraph {lg_version}, langgraph-checkpoint-sqlite {saver_version}, "
        f"Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version} (file on disk)"
    )
    rows = []
    for name, m in modes.items():
        if m is None:
            rows.append((f"durability {name}", "not supported by this LangGraph"))
            continue
        rows += [
            (f"durability {name}: runs measured", str(m["runs"])),
            ("  run latency p50", us(m["run_latency_p50_us"])),
            (
                "  per-step p50 / p90 / p99",
                f"{us(m['per_step_p50_us'])} / {us(m['per_step_p90_us'])} / "
                f"{us(m['per_step_p99_us'])}",
            ),
        ]
    width = max(len(l) for l, _ in rows)
    print("\n== peers: langgraph (10-step chain, SQLite checkpointer, in-process) ==")
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {
                    "langgraph": lg_version,
                    "langgraph_checkpoint_sqlite": saver_version,
                    "steps": STEPS,
                    "durability": modes,
                },
                f,
                indent=2,
            )
        print(f"figures written to {a.json}")


if __name__ == "__main__":
    main()
