"""Probe 1.3's pieces that need no GPU: the ResNet-50 definition, the batch finder's search and
its out-of-memory recovery, the loss rule, the spread, the collectives sweep, the topology
readers (against stand-ins for pynvml and amdsmi), the workload level and --find-batch.

The GPU paths themselves (fp16 autocast, events, pinned copies both ways, peer access) run on a
lent GPU: benchmarks/probe_gpu.py --issue32, docs/benchmarks.md."""

from __future__ import annotations

import enum
import importlib.util
import sys
import types
from typing import Any

import pytest
import torch

from envbuilder.probe import check_latency, check_topology, check_train
from envbuilder.probe.check_collectives import _iters, _sweep_sizes, bus_factor
from envbuilder.probe.cli import add_probe_arguments, options_from_args
from envbuilder.probe.common import CheckFailed, CheckResult, CheckSkipped, Context, spread
from envbuilder.probe.resnet import resnet50
from envbuilder.probe.runner import options_json

#: torchvision's ResNet50_Weights meta "num_params" (torchvision/models/resnet.py).
RESNET50_PARAMS = 25_557_032


def ctx(level: str = "quick", expect: str = "cpu", **kw: Any) -> Context:
    return Context(level=level, expect=expect, repeat=1, **kw)


# --------------------------------------------------------------------------- ResNet-50


def test_resnet50_is_the_standard_architecture() -> None:
    model = resnet50()
    assert sum(p.numel() for p in model.parameters()) == RESNET50_PARAMS
    state = model.state_dict()
    assert len(state) == 320  # 161 parameters, 159 buffers, torchvision's names
    assert state["fc.weight"].shape == (1000, 2048)
    assert state["layer4.2.conv3.weight"].shape == (2048, 512, 1, 1)
    assert state["layer2.0.downsample.0.weight"].shape == (512, 256, 1, 1)
    # v1.5: the stride of a stage's first block sits on its 3x3 convolution
    assert model.layer2[0].conv1.stride == (1, 1) and model.layer2[0].conv2.stride == (2, 2)
    assert [len(s) for s in (model.layer1, model.layer2, model.layer3, model.layer4)] == [
        3,
        4,
        6,
        3,
    ]
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 1000)


def test_resnet50_matches_torchvision_when_installed() -> None:
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed here (the probe's own model is what runs)")
    models = pytest.importorskip("torchvision.models")
    ours = {k: tuple(v.shape) for k, v in resnet50().state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in models.resnet50().state_dict().items()}
    assert ours == theirs


def test_resnet50_initialisation_is_torchvisions() -> None:
    """He-normal (fan_out) convolutions: the std of a 3x3x64 -> 64 conv is sqrt(2 / (64*9));
    batch norms at 1 and 0."""
    torch.manual_seed(0)
    model = resnet50()
    w = model.layer1[0].conv2.weight
    assert w.std().item() == pytest.approx((2 / (64 * 9)) ** 0.5, rel=0.05)
    assert bool((model.bn1.weight == 1).all()) and bool((model.bn1.bias == 0).all())


# --------------------------------------------------------------------------- batch finder


class FakeTrainer:
    """A trainer whose steps run out of memory above `capacity` images."""

    gpu = True
    device = "cuda:0"

    def __init__(self, batch: int, capacity: int) -> None:
        self.batch, self.capacity = batch, capacity
        self.x: Any = None
        self.y: Any = None
        self.opt = types.SimpleNamespace(zero_grad=lambda set_to_none=True: None)
        self.tried: list[int] = []

    def resize(self, batch: int) -> None:
        self.batch = batch

    def step(self) -> Any:
        self.tried.append(self.batch)
        if self.batch > self.capacity:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return torch.tensor(7.0)


@pytest.mark.parametrize(
    ("start", "capacity", "limit", "best"),
    [
        (256, 1000, 1 << 16, 512),  # up from a batch that fits
        (256, 100, 1 << 16, 64),  # down from one that does not
        (8, 5000, 1024, 1024),  # capped by the limit
        (4, 0, 1 << 16, 0),  # not even 1
        (1, 1, 1 << 16, 1),
    ],
)
def test_largest_batch_finds_the_largest_power_of_two(
    start: int, capacity: int, limit: int, best: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    trainer = FakeTrainer(start, capacity)
    found, tries = check_train.largest_batch(trainer, start, limit)  # type: ignore[arg-type]
    assert found == best
    assert all(ok == (b <= capacity) for b, ok in tries)
    assert tries[0][0] == start


def test_first_step_halves_the_batch_until_it_fits() -> None:
    trainer = FakeTrainer(256, 40)
    assert check_train.first_step(trainer) == 7.0  # type: ignore[arg-type]
    assert trainer.tried == [256, 128, 64, 32] and trainer.batch == 32


def test_first_step_raises_other_errors_and_cpu_oom() -> None:
    trainer = FakeTrainer(8, 4)
    trainer.gpu = False  # the CPU: running out of memory is not recoverable there
    with pytest.raises(torch.cuda.OutOfMemoryError):
        check_train.first_step(trainer)  # type: ignore[arg-type]
    assert not check_train.is_oom(RuntimeError("CUDA error: an illegal memory access"))
    assert check_train.is_oom(RuntimeError("HIP out of memory. Tried to allocate 1.00 GiB"))


def test_find_batch_on_the_cpu_says_why_not() -> None:
    trainer = FakeTrainer(2, 10)
    trainer.gpu = False
    result = CheckResult()
    check_train.find_batch(trainer, result)  # type: ignore[arg-type]
    assert "OOM killer" in result.details["find_batch"] and not result.metrics


# --------------------------------------------------------------------------- loss, spread


def test_losses_must_be_finite_and_fall() -> None:
    check_train._losses_ok([6.9, 3.0, 1.0, 0.2])
    with pytest.raises(CheckFailed, match="loss is nan at step 2"):
        check_train._losses_ok([6.9, 3.0, float("nan"), 0.2])
    with pytest.raises(CheckFailed, match="did not fall"):
        check_train._losses_ok([6.9, 6.8, 6.5, 6.3])  # 6.3 is not under 90% of 6.9


def test_spread() -> None:
    s = spread([5.0, 1.0, 3.0, 2.0, 4.0, 100.0, 6.0, 7.0, 8.0, 9.0, 10.0])
    assert s == {"median": 6.0, "p10": 2.0, "p90": 10.0, "min": 1.0, "max": 100.0, "n": 11}
    with pytest.raises(ValueError):
        spread([])


def test_train_plan_by_level() -> None:
    gpu = {lvl: check_train.plan(ctx(lvl, "rocm"), True) for lvl in ("quick", "workload")}
    assert (gpu["quick"]["size"], gpu["quick"]["batch"]) == (64, 32)
    assert (gpu["workload"]["size"], gpu["workload"]["batch"]) == (224, 256)
    assert gpu["workload"]["timed_s"] >= 10
    cpu = check_train.plan(ctx("quick"), False)
    assert (cpu["size"], cpu["batch"], cpu["min_steps"]) == (32, 2, 2)


def test_torchvision_only_at_the_levels_without_a_time_goal() -> None:
    # its import alone (6.4 s on an H100) would break the standard level's 10 s
    levels = ("quick", "standard", "long", "workload")
    assert [check_train.uses_torchvision(ctx(lvl, "cuda")) for lvl in levels] == [
        False,
        False,
        True,
        True,
    ]


def test_latency_on_the_cpu_counts_every_launch() -> None:
    result = check_latency.run(ctx())
    (launch,) = result.metrics
    assert launch["name"] == "launch_latency" and launch["higher_is_better"] is False
    p = check_latency.plan(ctx())
    assert result.details["launches"] == p["warmup"] + p["batches"] * p["per_batch"]
    assert result.details["launch_us"]["n"] == p["batches"]


# --------------------------------------------------------------------------- collectives


def test_sweep_is_rccl_tests_from_the_standard_level_on_gpus() -> None:
    standard = _sweep_sizes(ctx("standard", "rocm"), True)
    assert standard == [8 << i for i in range(28)]  # -b 8 -e 1G -f 2
    assert standard[-1] == 1 << 30
    assert _sweep_sizes(ctx("workload", "rocm"), True) == standard
    assert _sweep_sizes(ctx("quick", "rocm"), True) == [1 << 20, 4 << 20, 16 << 20, 64 << 20]
    assert min(_iters(ctx("standard", "rocm"), True, n) for n in standard) >= 20  # -n 20
    assert bus_factor(8) == pytest.approx(1.75)


# --------------------------------------------------------------------------- topology


def _fake_pynvml(nvlink_pairs: set[frozenset[str]], level: int) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")
    calls: list[str] = []
    nvml.nvmlInit = lambda: calls.append("init")  # type: ignore[attr-defined]
    nvml.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByPciBusId = lambda bdf: bdf  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetP2PStatus = (  # type: ignore[attr-defined]
        lambda a, b, index: 0 if index == 2 and frozenset((a, b)) in nvlink_pairs else 5
    )
    nvml.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: level  # type: ignore[attr-defined]
    nvml.calls = calls  # type: ignore[attr-defined]
    return nvml


def test_pynvml_links(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = _fake_pynvml({frozenset(("0000:1b:00.0", "0000:43:00.0"))}, 30)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    links, source = check_topology.pynvml_links(["0000:1b:00.0", "0000:43:00.0", "0000:52:00.0"])
    assert source == "pynvml"
    assert links == [
        {"a": 0, "b": 1, "kind": "nvlink"},
        {"a": 0, "b": 2, "kind": "pcie-host-bridge"},
        {"a": 1, "b": 2, "kind": "pcie-host-bridge"},
    ]
    assert nvml.calls == ["init", "shutdown"]


class LinkType(enum.IntEnum):
    UNDEFINED = 0
    PCIEXPRESS = 1
    XGMI = 2


def test_amdsmi_links_match_devices_by_pci_address(monkeypatch: pytest.MonkeyPatch) -> None:
    """amdsmi lists the GPUs in its own order and spells addresses its way: matched by
    address; the link type named whichever way amdsmi gives it (an enum or an int)."""
    amd = types.ModuleType("amdsmi")
    bdfs = {"h0": "0000:C1:00.0", "h1": "0:83:00.0"}  # amdsmi's order: not torch's
    amd.amdsmi_init = lambda: None  # type: ignore[attr-defined]
    amd.amdsmi_shut_down = lambda: None  # type: ignore[attr-defined]
    amd.amdsmi_get_processor_handles = lambda: list(bdfs)  # type: ignore[attr-defined]
    amd.amdsmi_get_gpu_device_bdf = bdfs.__getitem__  # type: ignore[attr-defined]
    amd.amdsmi_topo_get_link_type = lambda a, b: {"hops": 1, "type": 2}  # type: ignore[attr-defined]
    amd.AmdSmiIoLinkType = LinkType  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "amdsmi", amd)
    links, source = check_topology.amdsmi_links(["0000:83:00.0", "0000:c1:00.0"])
    assert (source, links) == ("amdsmi", [{"a": 0, "b": 1, "kind": "xgmi", "hops": 1}])
    assert check_topology._enum_name(LinkType.PCIEXPRESS, None) == "pciexpress"
    assert check_topology._enum_name(7, LinkType) == "7"


def test_link_kinds_without_the_library_or_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "amdsmi" else real(n, *a)
    )
    assert check_topology.link_kinds(2, hip=True) == (
        None,
        "amdsmi is not installed: peer access only",
    )
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(set(), 50))
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: object() if n == "pynvml" else real(n, *a)
    )
    monkeypatch.setattr(check_topology, "pci_address", lambda i: None)
    links, why = check_topology.link_kinds(2, hip=False)
    assert links is None and "PCI addresses" in why
    monkeypatch.setattr(check_topology, "pci_address", lambda i: f"0000:{i + 1:02x}:00.0")
    assert check_topology.link_kinds(2, hip=False) == (
        [{"a": 0, "b": 1, "kind": "system"}],
        "pynvml",
    )


def test_topology_skips_on_the_cpu() -> None:
    with pytest.raises(CheckSkipped, match="--expect cpu"):
        check_topology.run(ctx())


# --------------------------------------------------------------------------- options


def test_workload_level_is_standard_for_the_other_checks() -> None:
    assert ctx("workload").pick(1, 2, 3) == 2
    assert ctx("workload").pick(1, 2, 3, 4) == 4
    assert ctx("long").pick(1, 2, 3, 4) == 3


def test_find_batch_travels_from_the_command_line_to_the_checks() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_probe_arguments(parser)
    opts = options_from_args(
        parser.parse_args(["--expect", "rocm", "--level", "workload", "--find-batch"])
    )
    assert (opts.level, opts.find_batch) == ("workload", True)
    assert options_json(opts)["find_batch"] is True
    back = Context.from_json(ctx("workload", "rocm", find_batch=True).to_json())
    assert back.find_batch is True and back.level == "workload"
    assert Context.from_json({"level": "quick", "expect": "cpu", "repeat": 1}).find_batch is False
