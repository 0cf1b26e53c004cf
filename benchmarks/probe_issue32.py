"""Issue 32's GPU acceptance in one run: the probe's new figures against plain torch, side by side.

    OUT=/tmp/out python3 benchmarks/probe_issue32.py [--expect cuda] [--before OLD.pyz]
        [--quick-runs 2] [--latency-runs 3] [--train-seconds 10]

Steps (each with its own timeout; results under $OUT: summary.json, logs.txt, the reports):
  1. facts (python, torch, GPUs), the zipapp (its sha256) and a pylock of this interpreter;
  2. startup: plain `python -c` runs (nothing, `import torch`, the same with the garbage
     collector off, torch + a first CUDA kernel, torch + torchvision's ResNet-50 on the GPU),
     each timed twice: the floor under the probe's device check, and torchvision's price;
  3. timing: `probe --level quick` --quick-runs times and `--level standard` once, with --lock
     (goals: quick <= 5 s, standard <= 10 s); with --before, the old zipapp's quick level too,
     interleaved, for the before/after ratio on the same machine;
  4. latency, --latency-runs times interleaved: `probe --level standard --only latency` (the
     workload level's plan too) and, in a fresh process, plain torch loops of the probe's
     definition and plan (N launches closed by one synchronisation, over N; one launch and a
     synchronisation timed alone; medians), beside them in that process the probe's own
     functions and torch.utils.benchmark.Timer("x.add_(1)") / ("x.add_(1);
     torch.cuda.synchronize()").blocked_autorange; goal: the probe's median within 10 % of the
     plain loops' median;
  5. `probe --level workload --only train --only membw --find-batch`;
  6. right after, in a fresh process (its own CUDA context, as the probe's worker has), the
     plain torch references of the same things:
     - ResNet-50 (torchvision's, as the probe's workload run uses where torchvision is
       installed; else envbuilder.probe.resnet) at the probe's input size and batch, channels-last,
       fp16 autocast + GradScaler, torch.optim.SGD(lr 0.01, momentum 0.9, foreach), cuDNN
       benchmark on, random data; timed by wall clock around N steps and one synchronisation
       after warm-up (the probe times with events): images/s;
     - pinned host<->device copies of the probe's size, each way and both ways at once (two
       streams), timed by wall clock around N copies and a synchronisation;
  7. ratios probe / reference with the goals: images/s >= 0.95, bandwidths within 10 %.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and friends are set for every child).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_gpu import SAFE_ENV, check_times, metric, sh  # noqa: E402  (benchmarks/ on sys.path)

#: The acceptance goals of issue 32.
GOALS = {"quick_s": 5.0, "standard_s": 10.0, "images_ratio_min": 0.95, "within": 0.10}


# --------------------------------------------------------------------------- references


def ref_resnet(size: int, batch: int, seconds: float, torchvision: bool) -> dict[str, float]:
    """A plain training loop: images/s by wall clock over `seconds` of steps."""
    import torch

    if torchvision:
        import torchvision.models as models  # type: ignore[import-not-found]

        model = models.resnet50().cuda()
    else:
        from envbuilder.probe.resnet import resnet50

        model = resnet50(device="cuda")
    model = model.to(memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    scaler = torch.amp.GradScaler("cuda")
    torch.backends.cudnn.benchmark = True
    x = torch.randn(batch, 3, size, size, device="cuda").contiguous(
        memory_format=torch.channels_last
    )
    y = torch.randint(0, 1000, (batch,), device="cuda")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
        scaler.step(opt)
        scaler.update()

    for _ in range(15):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    steps = max(20, int(seconds / (time.perf_counter() - t0)))
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    return {"images_per_s": batch * steps / wall, "steps": steps, "batch": batch, "size": size}


def plain_launch_us(x: Any, batches: int, per_batch: int) -> list[float]:
    """Plain torch, the probe's definition: `per_batch` launches closed by one
    synchronisation, timed by the host clock, over `per_batch`; one value a batch."""
    import torch

    out = []
    for _ in range(batches):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(per_batch):
            x.add_(1)
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e6 / per_batch)
    return out


def plain_sync_us(x: Any, count: int) -> list[float]:
    """Plain torch, the probe's definition: one launch and a synchronisation, each timed."""
    import torch

    out = []
    for _ in range(count):
        t0 = time.perf_counter()
        x.add_(1)
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def ref_latency(level: str, rounds: int = 3) -> dict[str, Any]:
    """Microseconds, in this one process, interleaved `rounds` times: the plain loops of the
    probe's definition and plan (the reference), the probe's own functions (the same process:
    the method's difference alone), and torch.utils.benchmark.Timer (blocked_autorange: blocks
    of statements with a synchronisation before each clock read; its median is of block means).
    """
    import torch
    import torch.utils.benchmark as tb

    from envbuilder.probe import check_latency
    from envbuilder.probe.common import Context

    p = check_latency.plan(Context(level=level, expect="cuda", repeat=1))
    x = torch.zeros(1, dtype=torch.int64, device="cuda")
    for _ in range(p["warmup"]):
        x.add_(1)
    torch.cuda.synchronize()
    dev = torch.device("cuda", torch.cuda.current_device())

    def op() -> None:
        x.add_(1)

    def sync() -> None:
        torch.cuda.synchronize(dev)

    launch_timer = tb.Timer("x.add_(1)", globals={"x": x})
    sync_timer = tb.Timer("x.add_(1); torch.cuda.synchronize()", globals={"x": x, "torch": torch})
    got: dict[str, list[float]] = {k: [] for k in ("plain", "probe_fn", "timer")}
    synced: dict[str, list[float]] = {k: [] for k in ("plain", "probe_fn", "timer")}
    for _ in range(rounds):
        got["plain"].append(statistics.median(plain_launch_us(x, p["batches"], p["per_batch"])))
        synced["plain"].append(statistics.median(plain_sync_us(x, p["round_trips"])))
        got["probe_fn"].append(statistics.median(check_latency.launch_times(op, sync, p)))
        synced["probe_fn"].append(
            statistics.median(check_latency.sync_times(op, sync, p["round_trips"]))
        )
        got["timer"].append(launch_timer.blocked_autorange(min_run_time=0.5).median * 1e6)
        synced["timer"].append(sync_timer.blocked_autorange(min_run_time=0.5).median * 1e6)
    return {
        "plan": p,
        "launch_us": {k: statistics.median(v) for k, v in got.items()},
        "sync_us": {k: statistics.median(v) for k, v in synced.items()},
        "launch_rounds": got,
        "sync_rounds": synced,
    }


def _copies_gbps(copies: list[Any], nbytes: int, iters: int) -> float:
    """Wall-clock GB/s of `iters` rounds of `copies` (each on its own stream), all queued."""
    import torch

    streams = [torch.cuda.Stream() for _ in copies]  # type: ignore[no-untyped-call]
    for stream, copy in zip(streams, copies, strict=True):  # warm-up
        with torch.cuda.stream(stream):
            copy()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for stream, copy in zip(streams, copies, strict=True):
        with torch.cuda.stream(stream):
            for _ in range(iters):
                copy()
    torch.cuda.synchronize()
    return len(copies) * nbytes * iters / (time.perf_counter() - t0) / 1e9


def ref_bandwidth(nbytes: int) -> dict[str, float]:
    """Pinned copies each way alone and both ways at once, median of 5 runs of 20 each."""
    import torch

    host_a = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    host_b = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev_a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dev_b = torch.empty(nbytes, dtype=torch.uint8, device="cuda")

    def h2d() -> None:
        dev_a.copy_(host_a, non_blocking=True)

    def d2h() -> None:
        host_b.copy_(dev_b, non_blocking=True)

    def med(copies: list[Any]) -> float:
        return statistics.median(_copies_gbps(copies, nbytes, 20) for _ in range(5))

    return {"h2d_GBps": med([h2d]), "d2h_GBps": med([d2h]), "bidir_GBps": med([h2d, d2h])}


def references(args: argparse.Namespace) -> int:
    """The --_refs child: the training and bandwidth references, as one JSON line on stdout;
    with --_latency the latency references alone."""
    if args._latency:
        print(json.dumps({"latency": ref_latency(args._latency)}))
        return 0
    out: dict[str, Any] = {"bandwidth": ref_bandwidth(args.bytes)}
    out["resnet"] = ref_resnet(args.size, args.batch, args.train_seconds, args.torchvision)
    print(json.dumps(out))
    return 0


# --------------------------------------------------------------------------- the run


def probe_cmd(py: str, pyz: Path, level: str, expect: str, out: Path, *extra: str) -> list[str]:
    return [py, str(pyz), "--level", level, "--expect", expect, "--json", str(out), *extra]


def timing(
    args: argparse.Namespace, py: str, pyz: Path, lock: Path, out: Path, logs: Path
) -> dict[str, Any]:
    """quick (and --before's quick, interleaved) --quick-runs times, then standard once."""
    runs: dict[str, list[dict[str, Any]]] = {"quick": [], "before_quick": [], "standard": []}
    variants = [("quick", pyz)] + ([("before_quick", args.before)] if args.before else [])
    for i in range(args.quick_runs):
        for name, zipapp in variants:
            report = out / f"{name}{i}.json"
            cmd = probe_cmd(py, zipapp, "quick", args.expect, report, "--lock", str(lock))
            code, wall, _ = sh(cmd, logs / f"{name}{i}.log", 300)
            runs[name].append({"exit": code, "wall_s": round(wall, 2), **check_times(report)})
    report = out / "standard.json"
    cmd = probe_cmd(py, pyz, "standard", args.expect, report, "--lock", str(lock))
    code, wall, _ = sh(cmd, logs / "standard.log", 400)
    runs["standard"].append({"exit": code, "wall_s": round(wall, 2), **check_times(report)})
    return runs


def _train_details(report: dict[str, Any]) -> dict[str, Any]:
    for c in report["checks"]:
        if c["name"] == "train":
            return dict(c["details"])
    return {}


def compare_figures(report: dict[str, Any], refs: dict[str, Any], size: str) -> dict[str, Any]:
    """probe / reference for each figure, and whether it meets its goal."""
    d = _train_details(report)
    pairs = {
        "images_per_s": (
            metric(report, "train", "images_per_s", d.get("amp_dtype") or "fp32", d.get("input")),
            refs["resnet"]["images_per_s"],
        ),
        "h2d_GBps": (
            metric(report, "membw", "h2d_bandwidth", None, size),
            refs["bandwidth"]["h2d_GBps"],
        ),
        "d2h_GBps": (
            metric(report, "membw", "d2h_bandwidth", None, size),
            refs["bandwidth"]["d2h_GBps"],
        ),
        "bidir_GBps": (
            metric(report, "membw", "bidir_bandwidth", None, size),
            refs["bandwidth"]["bidir_GBps"],
        ),
    }
    out = {}
    for name, (probe, ref) in pairs.items():
        ratio = probe / ref if probe and ref else None
        goal = (
            ratio is not None and ratio >= GOALS["images_ratio_min"]
            if name == "images_per_s"
            else ratio is not None and abs(ratio - 1) <= GOALS["within"]
        )
        out[name] = {"probe": probe, "reference": ref, "ratio": ratio, "meets_goal": goal}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expect", default="cuda")
    parser.add_argument("--before", type=Path, help="another probe zipapp, for quick before/after")
    parser.add_argument("--quick-runs", type=int, default=2)
    parser.add_argument("--train-seconds", type=float, default=10.0)
    parser.add_argument("--latency-runs", type=int, default=3)
    parser.add_argument("--_refs", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--_latency", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=224, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=256, help=argparse.SUPPRESS)
    parser.add_argument("--bytes", type=int, default=256 << 20, help=argparse.SUPPRESS)
    parser.add_argument("--torchvision", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._refs:
        return references(args)
    return run(args)


def run(args: argparse.Namespace) -> int:
    out = Path(os.environ.get("OUT") or "bench-out")
    out.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="issue32-"))
    os.environ.update(SAFE_ENV)
    py = sys.executable
    import torch

    from envbuilder.probe import build_zipapp

    summary: dict[str, Any] = {
        "facts": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        },
        "goals": GOALS,
    }
    pyz = build_zipapp(logs / "probe.pyz")
    summary["zipapp_sha256"] = hashlib.sha256(pyz.read_bytes()).hexdigest()
    lock = logs / "self.pylock.toml"
    subprocess.run([py, str(ROOT / "tests/data/probe/make_pylock.py"), str(lock)], check=True)
    summary["startup"] = startup(py, logs)
    print(json.dumps(summary["startup"]), flush=True)
    summary["timing"] = timing(args, py, pyz, lock, out, logs)
    print(json.dumps(summary["timing"]), flush=True)
    summary["latency"] = latency(args, py, pyz, out, logs)
    print(json.dumps(summary["latency"]), flush=True)
    summary["workload"] = workload(args, py, pyz, out, logs)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "logs.txt").write_text(
        "\n\n".join(f"===== {p.name}\n{p.read_text()}" for p in sorted(logs.glob("*.log")))
    )
    print(json.dumps(summary, indent=1))
    return 0


#: Plain interpreter starts, each timed alone: the floor under the probe's device check.
STARTUP = {
    "python": "pass",
    "import_torch": "import torch",
    "import_torch_gc_off": "import gc; gc.disable(); import torch",
    "torch_and_cuda": "import torch; torch.zeros(1, device='cuda').add_(1).item()",
    "torch_and_torchvision_resnet50": (
        "import torch, torchvision.models as m; m.resnet50().cuda()"
    ),
}


def startup(py: str, logs: Path, runs: int = 2) -> dict[str, list[float]]:
    """Wall seconds of `python -c CODE` for each of STARTUP, `runs` times, interleaved."""
    out: dict[str, list[float]] = {name: [] for name in STARTUP}
    for i in range(runs):
        for name, code in STARTUP.items():
            status, wall, _ = sh([py, "-c", code], logs / f"startup-{name}-{i}.log", 120)
            out[name].append(round(wall, 3) if status == 0 else -1.0)
    return out


def _latency_figures(report: Path) -> dict[str, float | None]:
    if not report.is_file():
        return {"launch_us": None, "sync_us": None}
    data = json.loads(report.read_text())
    return {
        "launch_us": metric(data, "latency", "launch_latency", None, None),
        "sync_us": metric(data, "latency", "sync_latency", None, None),
    }


def latency(args: argparse.Namespace, py: str, pyz: Path, out: Path, logs: Path) -> dict[str, Any]:
    """The probe's latency figures (`--level standard --only latency`, the workload level's
    plan too) and the plain torch references' (a fresh process each), interleaved
    --latency-runs times; the ratio of their medians per figure, with the goal."""
    probe_runs: list[dict[str, float | None]] = []
    ref_runs: list[dict[str, Any]] = []
    for i in range(args.latency_runs):
        report = out / f"latency{i}.json"
        cmd = probe_cmd(py, pyz, "standard", args.expect, report, "--only", "latency")
        sh(cmd, logs / f"latency{i}.log", 120)
        probe_runs.append(_latency_figures(report))
        code, _, text = sh(
            [py, __file__, "--_refs", "--_latency", "standard"], logs / f"latency-ref{i}.log", 120
        )
        if code == 0:
            line = next(x for x in reversed(text.splitlines()) if x.startswith('{"latency"'))
            ref_runs.append(json.loads(line)["latency"])
    result: dict[str, Any] = {"probe_runs": probe_runs, "reference_runs": ref_runs}
    for fig in ("launch_us", "sync_us"):
        probe = [v for r in probe_runs if (v := r[fig]) is not None]
        if not probe or not ref_runs:
            continue
        refs = {k: statistics.median(r[fig][k] for r in ref_runs) for k in ref_runs[0][fig]}
        median = statistics.median(probe)
        ratio = median / refs["plain"]
        result[fig] = {
            "probe": median,
            "reference": refs["plain"],
            "ratio": ratio,
            "meets_goal": abs(ratio - 1) <= GOALS["within"],
            "probe_fn_same_process": refs["probe_fn"],
            "timer": refs["timer"],
            "ratio_to_timer": median / refs["timer"],
        }
    return result


def workload(args: argparse.Namespace, py: str, pyz: Path, out: Path, logs: Path) -> dict[str, Any]:
    """The probe's workload figures, then the plain torch references right after."""
    report_path = out / "workload.json"
    only = ["--only", "train", "--only", "membw", "--find-batch"]
    code, wall, _ = sh(
        probe_cmd(py, pyz, "workload", args.expect, report_path, *only), logs / "workload.log", 580
    )
    result: dict[str, Any] = {"exit": code, "wall_s": round(wall, 1), **check_times(report_path)}
    if not report_path.is_file():
        return result
    report = json.loads(report_path.read_text())
    d = _train_details(report)
    size = next(
        (
            m["size"]
            for c in report["checks"]
            if c["name"] == "membw"
            for m in c["metrics"]
            if m["name"] == "h2d_bandwidth"
        ),
        str(256 << 20),
    )
    result["train"] = d
    refs_cmd = [
        py,
        __file__,
        "--_refs",
        "--size",
        str(int(d["input"].split("x")[0])),
        "--batch",
        str(d["batch"]),
        "--bytes",
        size,
        "--train-seconds",
        str(args.train_seconds),
    ]
    if str(d.get("model", "")).startswith("ResNet-50 (torchvision"):
        refs_cmd.append("--torchvision")
    code, wall, text = sh(refs_cmd, logs / "references.log", 300)
    if code != 0:
        result["references"] = text[-2000:]
        return result
    refs = next(json.loads(x) for x in reversed(text.splitlines()) if x.startswith('{"bandwidth"'))
    result["references"] = refs
    result["compare"] = compare_figures(report, refs, size)
    return result


if __name__ == "__main__":
    sys.exit(main())
