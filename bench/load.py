"""Speed under load: plain decoding quiet and beside bounded competing work, per back-end,
thread count, thread-waiting setting and (llama.cpp) thread policy.

Each configuration runs in a worker process of its own (libgomp reads its waiting policy
once, when llama.cpp loads; ONNX Runtime makes its shared pool once), which loads the model,
warms up, and decodes on the parent's word. All workers start first; then the parent starts
one competing job, waits for it to ramp up, has every worker decode in turn (the order
reversed every other quiet and every other loaded turn), and stops the job; quiet turns
come first, between the loads and last, so the quiet figure is their mean, drift shows, and
configurations compare under the same instance of each job. Every job also stops by itself
after --load-seconds.

Jobs: busy (one busy loop), busy-low (one at nice 19), busy-all (one per core),
bandwidth (numpy streaming copies of 256 MB arrays, one thread), blas (numpy matmuls on a
multi-threaded BLAS with a thread per core).
Waiting settings: llama.cpp `default` (libgomp's), `passive` (OMP_WAIT_POLICY=PASSIVE),
`spin-N` (GOMP_SPINCOUNT=N); ONNX Runtime (runtimes/onnxrt.ThreadPool) `default`
(edgespec's), `shared` (the process-wide pool, spinning by ONNX Runtime's count),
`shared-stop` (the same, its spinning stopped after each run: session.force_spinning_stop),
`own` (a pool per session, spinning off), `own-spin` (spinning by ONNX Runtime's count),
`own-spin-N` (spinning at most N microseconds).
Thread policies (llama.cpp): `load-aware` (edgespec's default: a thread fewer per core other
work holds, runtimes/threads.py), `fixed` (--fixed-threads). Each run records how many
passes ran at each thread count.

    python bench/load.py --target demo-target --onnx-target ~/bundles/demo-onnx/target \
        --draft demo-draft --threads 2 --llama-policy load-aware,fixed --json load.json

With --draft (llama.cpp) or --onnx-draft (ONNX Runtime) each configuration also runs `auto`.
The job `quiet` is a turn with nothing beside: `--jobs quiet,quiet,quiet` compares the
configurations' quiet speed over many interleaved turns.

Jobs run in this command's session unless `--apart` starts each in a session of its own, as
a job started from another terminal or by a service is. Where the kernel's autogroup
scheduling is on (/proc/sys/kernel/sched_autogroup_enabled, as many distributions' kernels
have it), a session's threads share the CPU as one group against another session's,
so the two placements load the decoder differently; the report records which ran.

Every configuration's worker holds its model(s) for the whole run (1-2 GB each for the demo
pair): name a few configurations per run, not every combination.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PROMPT = (
    "Explain, in a few paragraphs, how a refrigerator moves heat from its inside to the room, "
    "and why the back of it feels warm."
)
ONNX_WAITS = ("default", "shared", "shared-stop", "own", "own-spin", "own-spin-N")
LLAMA_POLICIES = ("load-aware", "fixed")
JOBS = ("busy", "busy-low", "busy-all", "bandwidth", "blas")
BUSY = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end:\n    pass\n"
BANDWIDTH = (
    "import time, numpy as np\nend = time.monotonic() + {s}\n"
    "a = np.ones(32 * 2**20)\nb = np.empty_like(a)\n"
    "while time.monotonic() < end:\n    np.copyto(b, a)\n    np.copyto(a, b)\n"
)
BLAS = (
    "import time, numpy as np\nend = time.monotonic() + {s}\n"
    "a = np.random.rand(768, 768)\n"
    "while time.monotonic() < end:\n    a = (a @ a) / 768.0\n"
)


@dataclass(frozen=True)
class Config:
    backend: str  # llama | onnx
    model: str
    threads: int
    wait: str  # llama: default | passive | spin-N; onnx: ONNX_WAITS
    tokens: int
    n_ctx: int = 1024
    policy: str = "fixed"  # llama: load-aware | fixed; onnx: fixed (its pool is sized once)
    draft: str | None = None  # given: the speculative loop (`auto`), else plain decoding

    @property
    def label(self) -> str:
        label = self.wait if self.policy == "fixed" else f"{self.wait}/{self.policy}"
        return label + (" auto" if self.draft else "")


def check_config(config: Config) -> None:
    """Waits, thread policies and drafts each back-end takes, before any worker starts."""
    worker_env(config)  # refuses an unknown wait
    if config.backend == "onnx" and config.policy != "fixed":
        raise SystemExit("ONNX Runtime here: policy fixed (its pool is sized once)")
    if config.policy not in LLAMA_POLICIES:
        raise SystemExit(f"llama.cpp policy {config.policy!r}: {', '.join(LLAMA_POLICIES)}")


def worker_env(config: Config) -> dict[str, str]:
    """The environment a worker starts with: only the waiting policy under test differs."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if config.backend == "llama":
        if config.wait == "passive":
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        elif config.wait.startswith("spin-"):
            env["GOMP_SPINCOUNT"] = config.wait.removeprefix("spin-")
        elif config.wait != "default":
            raise SystemExit(f"llama.cpp wait {config.wait!r}: default, passive or spin-N")
    else:
        onnx_pool(config.wait)
    return env


def onnx_pool(wait: str):
    """The ThreadPool an ONNX Runtime wait names (None: edgespec's default)."""
    from edgespec.runtimes.onnxrt import SHARED_POOL, ThreadPool

    named = {
        "default": None,
        "shared": SHARED_POOL,
        "shared-stop": ThreadPool(shared=True, spin_us=None, stop_after_run=True),
        "own": ThreadPool(spin_us=0),
        "own-spin": ThreadPool(spin_us=None),
    }
    if wait in named:
        return named[wait]
    spin = wait.removeprefix("own-spin-")
    if wait.startswith("own-spin-") and spin.isdigit() and int(spin) > 0:
        return ThreadPool(spin_us=int(spin))
    raise SystemExit(f"ONNX Runtime wait {wait!r}: {', '.join(ONNX_WAITS)}")


def job_command(job: str, seconds: float) -> list[list[str]]:
    """One command per process of the job; each ends by itself after `seconds`."""
    py = sys.executable
    if job == "busy":
        return [[py, "-c", BUSY.format(s=seconds)]]
    if job == "busy-low":
        return [["nice", "-n", "19", py, "-c", BUSY.format(s=seconds)]]
    if job == "busy-all":
        return [[py, "-c", BUSY.format(s=seconds)] for _ in range(os.cpu_count() or 1)]
    if job == "bandwidth":
        return [[py, "-c", BANDWIDTH.format(s=seconds)]]
    if job == "blas":
        return [[py, "-c", BLAS.format(s=seconds)]]
    if job == "quiet":
        return []
    raise SystemExit(f"unknown job {job!r}; choose from quiet, {', '.join(JOBS)}")


def job_env(job: str) -> dict[str, str]:
    env = dict(os.environ)
    if job == "blas":
        cores = str(os.cpu_count() or 1)
        env.update(OPENBLAS_NUM_THREADS=cores, OMP_NUM_THREADS=cores, MKL_NUM_THREADS=cores)
    else:
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


# --- the worker: one model, plain decoding on request -------------------------------------


def open_decoder(config: Config):
    """The configuration's decoder (plain, or `auto` with the draft) and its runtimes."""
    from edgespec.backends import RuntimeOptions
    from edgespec.controller import FixedPolicy
    from edgespec.engine import SpeculativeDecoder
    from edgespec.loader import SpecOptions, build_decoder
    from edgespec.pair import ModelPair, open_pair

    opts = RuntimeOptions(
        n_ctx=config.n_ctx, n_threads=config.threads, load_aware_threads=config.policy != "fixed"
    )
    if config.backend == "onnx":  # opened here: the pool is not a RuntimeOptions choice
        from edgespec.runtimes.onnxrt import OnnxRuntime

        def onnx(path: str) -> OnnxRuntime:
            pool = onnx_pool(config.wait)
            return OnnxRuntime(path, n_ctx=config.n_ctx, n_threads=config.threads, pool=pool)

        draft = Path(config.draft) if config.draft else None
        target = onnx(config.model)
        pair = ModelPair(target, draft and onnx(str(draft)), Path(config.model), draft, opts)
    else:
        pair = open_pair(config.model, config.draft, opts)
    if config.draft:
        decoder = build_decoder(pair, SpecOptions("auto", None, 16))
    else:
        decoder = SpeculativeDecoder(pair.target, [], FixedPolicy(None, 0))
    return decoder, [rt for rt in (pair.target, pair.draft) if rt is not None]


def serve_worker(config: Config) -> None:
    """Print "ready" once warm; then for each line on stdin decode and print one JSON line."""
    from collections import Counter

    from edgespec.chat import chat_tokens

    decoder, runtimes = open_decoder(config)
    tokens = chat_tokens(runtimes[0], [{"role": "user", "content": PROMPT}])
    decoder.generate(tokens, max_tokens=min(8, config.tokens))  # warm-up: pages, pools
    print("ready", flush=True)

    def passes_by_threads() -> Counter:  # llama.cpp: passes per thread count, both models
        return sum((Counter(getattr(rt, "threads_used", {})) for rt in runtimes), Counter())

    for _ in sys.stdin:
        before = passes_by_threads()
        result = decoder.generate(tokens, max_tokens=config.tokens)
        stats = result.stats
        got: dict = {"tokens": stats.n_generated, "seconds": stats.t_decode}
        if config.backend == "llama":
            used = passes_by_threads() - before
            got["passes_by_threads"] = {str(n): c for n, c in sorted(used.items())}
        print(json.dumps(got), flush=True)


# --- the parent ------------------------------------------------------------------------------


class Worker:
    def __init__(self, config: Config):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", json.dumps(asdict(config))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=worker_env(config),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.close()
            raise SystemExit(f"worker for {config} did not start (said {line!r})")

    def decode(self) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_job(job: str, seconds: float, apart: bool = False) -> list[subprocess.Popen]:
    """The job's processes; apart: in a session of their own (see --apart)."""
    return [
        subprocess.Popen(cmd, env=job_env(job), start_new_session=apart)
        for cmd in job_command(job, seconds)
    ]


def stop_job(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def schedule(jobs: list[str]) -> list[str]:
    """quiet, job, quiet, job, ..., quiet: every loaded run has a quiet one beside it."""
    out = ["quiet"]
    for job in jobs:
        out += [job, "quiet"]
    return out


def turn_order(n: int, turn: int) -> list[int]:
    """Workers' order in a turn: reversed every other pair of turns, so quiet turns (even) and
    loaded turns (odd) each alternate, and no configuration always decodes first."""
    order = list(range(n))
    return order[::-1] if (turn // 2) % 2 else order


def measure(
    configs: list[Config], jobs: list[str], load_seconds: float, ramp: float, apart: bool = False
) -> list:
    """Every configuration decodes once per turn, under the same instance of the turn's job."""
    workers: list[Worker] = []
    runs: list[list[dict]] = [[] for _ in configs]
    try:
        for config in configs:
            workers.append(Worker(config))
        for turn, job in enumerate(schedule(jobs)):
            procs = [] if job == "quiet" else start_job(job, load_seconds, apart)
            try:
                time.sleep(ramp if procs else 0.0)
                for i in turn_order(len(workers), turn):
                    runs[i].append({"job": job, **workers[i].decode()})
            finally:
                stop_job(procs)
            print(f"  turn {turn + 1}: {job}", flush=True)
    finally:
        for worker in workers:
            worker.close()
    return [summarize(config, r) for config, r in zip(configs, runs, strict=True)]


def summarize(config: Config, runs: list[dict]) -> dict:
    def rate(rs: list[dict]) -> float:
        t = sum(r["seconds"] for r in rs)
        return sum(r["tokens"] for r in rs) / t if t > 0 else 0.0

    quiet_runs = [r for r in runs if r["job"] == "quiet"]
    quiet = rate(quiet_runs)
    rates = [rate([r]) for r in quiet_runs]
    loaded = {
        r["job"]: {"tok_s": round(rate([r]), 3), "of_quiet": round(rate([r]) / quiet, 4)}
        for r in runs
        if r["job"] != "quiet" and quiet > 0
    }
    return {
        **asdict(config),
        "label": config.label,
        "quiet_tok_s": round(quiet, 3),
        "quiet_spread": round((max(rates) - min(rates)) / quiet, 4) if quiet else None,
        "loaded": loaded,
        "runs": runs,
    }


def table(rows: list[dict], jobs: list[str]) -> list[str]:
    head = f"{'back-end':<8} {'thr':>3} {'wait':<20} {'quiet':>7} {'drift':>6}" + "".join(
        f" {j:>15}" for j in jobs
    )
    lines = [head]
    for r in rows:
        cells = "".join(
            f" {r['loaded'][j]['tok_s']:>7.1f} {r['loaded'][j]['of_quiet']:>6.0%}"
            if j in r["loaded"]
            else f" {'-':>15}"
            for j in jobs
        )
        lines.append(
            f"{r['backend']:<8} {r['threads']:>3} {r['label']:<20} "
            f"{r['quiet_tok_s']:>7.1f} "
            f"{r['quiet_spread'] or 0:>6.1%}{cells}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--target", help="GGUF target for llama.cpp (or demo-target)")
    p.add_argument("--onnx-target", help="exported ONNX target folder for ONNX Runtime")
    p.add_argument("--threads", default="2")
    p.add_argument("--llama-wait", default="default", help="e.g. default,passive,spin-10000")
    p.add_argument("--llama-policy", default="load-aware,fixed", help="thread policies")
    p.add_argument("--draft", help="GGUF draft (or demo-draft): llama.cpp runs `auto` too")
    p.add_argument("--onnx-draft", help="exported ONNX draft folder: ONNX Runtime runs `auto` too")
    p.add_argument("--onnx-wait", default="default", help=f"of {','.join(ONNX_WAITS)}")
    p.add_argument("--jobs", default=",".join(JOBS))
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--load-seconds", type=float, default=120.0, help="each job's own limit")
    p.add_argument("--ramp", type=float, default=1.0, help="seconds a job runs before decoding")
    p.add_argument("--apart", action="store_true", help="start each job in a session of its own")
    p.add_argument("--json")
    args = p.parse_args(argv)
    if args.worker:
        serve_worker(Config(**json.loads(args.worker)))
        return 0

    from edgespec.app.bench import machine_info, machine_line
    from edgespec.app.models import resolve_model
    from edgespec.runtimes.threads import autogroup_enabled

    jobs = [j for j in args.jobs.split(",") if j]
    for job in jobs:
        job_command(job, 0)  # unknown names fail before anything starts
    configs = []
    for threads in (int(t) for t in args.threads.split(",")):
        if args.target:
            target = str(resolve_model(args.target))
            drafts = [None, str(resolve_model(args.draft))] if args.draft else [None]
            configs += [Config("llama", target, threads, w, args.tokens, policy=policy, draft=d)
                        for d in drafts
                        for w in args.llama_wait.split(",")
                        for policy in args.llama_policy.split(",")]  # fmt: skip
        if args.onnx_target:
            drafts = [None, args.onnx_draft] if args.onnx_draft else [None]
            configs += [Config("onnx", args.onnx_target, threads, w, args.tokens, draft=d)
                        for d in drafts
                        for w in args.onnx_wait.split(",")]  # fmt: skip
    if not configs:
        raise SystemExit("give --target (GGUF) and/or --onnx-target (ONNX folder)")
    for config in configs:
        check_config(config)
    machine = machine_info()
    print(machine_line(machine))
    placement = {"apart": args.apart, "autogroup": autogroup_enabled()}
    print(f"jobs {'apart, in sessions of their own' if args.apart else 'in this session'}; "
          f"autogroup scheduling: {placement['autogroup']}")  # fmt: skip
    rows = measure(configs, jobs, args.load_seconds, args.ramp, args.apart)
    print("\n".join(table(rows, jobs)))
    if args.json:
        report = {"machine": machine, "jobs": placement, "rows": rows}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    from edgespec.hugepages import reexec_with_tunable

    reexec_with_tunable()  # workers inherit it: they decode in the memory the command gives
    sys.exit(main())
