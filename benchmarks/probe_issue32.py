"""Issue 32's GPU acceptance in one run: the probe's new figures against plain torch, side by side.

    OUT=/tmp/out python3 benchmarks/probe_issue32.py [--expect cuda] [--before OLD.pyz]
        [--quick-runs 2] [--train-seconds 10]

Steps (each with its own timeout; results under $OUT: summary.json, logs.txt, the reports):
  1. facts (python, torch, GPUs), the zipapp (its sha256) and a pylock of this interpreter;
  2. timing: `probe --level quick` --quick-runs times and `--level standard` once, with --lock
     (goals: quick <= 5 s, standard <= 10 s); with --before, the old zipapp's quick level too,
     interleaved, for the before/after ratio on the same machine;
  3. `probe --level workload --only train --only latency --only membw --find-batch`;
  4. right after, in a fresh process (its own CUDA context, as the probe's worker has), the
     plain torch references of the same things:
     - ResNet-50 (torchvision's, as the probe's workload run uses where torchvision is
       installed; else envbuilder.probe.resnet) at the probe's input size and batch, channels-last,
       fp16 autocast + GradScaler, torch.optim.SGD(lr 0.01, momentum 0.9, foreach), cuDNN
       benchmark on, random data; timed by wall clock around N steps and one synchronisation
       after warm-up (the probe times with events): images/s;
     - launch latency: torch.utils.benchmark.Timer("x.add_(1)").blocked_autorange (the Timer
       synchronises before each clock read: N launches and one synchronisation, over N, the
       probe's definition); sync latency: the same of "x.add_(1); torch.cuda.synchronize()";
     - pinned host<->device copies of the probe's size, each way and both ways at once (two
       streams), timed by wall clock around N copies and a synchronisation;
  5. ratios probe / reference with the goals: images/s >= 0.95, latencies and bandwidths
     within 10 %.
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


def ref_latency() -> dict[str, float]:
    """torch.utils.benchmark medians, in microseconds."""
    import torch
    import torch.utils.benchmark as tb

    x = torch.zeros(1, dtype=torch.int64, device="cuda")
    launch = tb.Timer("x.add_(1)", globals={"x": x}).blocked_autorange(min_run_time=1.0)
    sync = tb.Timer(
        "x.add_(1); torch.cuda.synchronize()", globals={"x": x, "torch": torch}
    ).blocked_autorange(min_run_time=1.0)
    return {"launch_us": launch.median * 1e6, "sync_us": sync.median * 1e6}


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
    """The --_refs child: every reference, as one JSON line on stdout."""
    out: dict[str, Any] = {"latency": ref_latency(), "bandwidth": ref_bandwidth(args.bytes)}
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
        "launch_us": (
            metric(report, "latency", "launch_latency", None, None),
            refs["latency"]["launch_us"],
        ),
        "sync_us": (
            metric(report, "latency", "sync_latency", None, None),
            refs["latency"]["sync_us"],
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
    parser.add_argument("--_refs", action="store_true", help=argparse.SUPPRESS)
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
    summary["timing"] = timing(args, py, pyz, lock, out, logs)
    print(json.dumps(summary["timing"]), flush=True)
    summary["workload"] = workload(args, py, pyz, out, logs)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "logs.txt").write_text(
        "\n\n".join(f"===== {p.name}\n{p.read_text()}" for p in sorted(logs.glob("*.log")))
    )
    print(json.dumps(summary, indent=1))
    return 0


def workload(args: argparse.Namespace, py: str, pyz: Path, out: Path, logs: Path) -> dict[str, Any]:
    """The probe's workload figures, then the plain torch references right after."""
    report_path = out / "workload.json"
    only = ["--only", "train", "--only", "latency", "--only", "membw", "--find-batch"]
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
    refs = next(json.loads(x) for x in reversed(text.splitlines()) if x.startswith('{"latency"'))
    result["references"] = refs
    result["compare"] = compare_figures(report, refs, size)
    return result


if __name__ == "__main__":
    sys.exit(main())
