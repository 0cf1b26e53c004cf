"""ResNet-50 with torch alone: torchvision's `resnet50()` architecture, for envs without it.

The train check uses torchvision's model where torchvision imports and this one otherwise, so
both must be the same network: the same layers, shapes, parameter names (state_dict keys) and
initialisation as torchvision.models.resnet50 (ResNet v1.5: the stride sits on the 3x3
convolution of a bottleneck; 25,557,032 parameters; tested). torch is imported inside the
function, never at import time (the probe's parent process must not load it).
"""

from __future__ import annotations

import functools
from typing import Any

#: Bottleneck blocks per stage, and each stage's width (ResNet-50: He et al. 2015, table 1).
LAYERS = (3, 4, 6, 3)
WIDTHS = (64, 128, 256, 512)
EXPANSION = 4
NUM_CLASSES = 1000


@functools.cache
def _bottleneck() -> Any:
    """The Bottleneck module class (defined once torch is imported)."""
    from torch import Tensor, nn

    class Bottleneck(nn.Module):
        """1x1 reduce, 3x3 (strided), 1x1 expand, each with batch norm; identity shortcut."""

        def __init__(self, inplanes: int, planes: int, stride: int, device: Any) -> None:
            super().__init__()
            out, on = planes * EXPANSION, {"device": device}
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False, **on)
            self.bn1 = nn.BatchNorm2d(planes, **on)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False, **on)
            self.bn2 = nn.BatchNorm2d(planes, **on)
            self.conv3 = nn.Conv2d(planes, out, 1, bias=False, **on)
            self.bn3 = nn.BatchNorm2d(out, **on)
            self.relu = nn.ReLU(inplace=True)
            self.downsample: nn.Module | None = None
            if stride != 1 or inplanes != out:
                self.downsample = nn.Sequential(
                    nn.Conv2d(inplanes, out, 1, stride=stride, bias=False, **on),
                    nn.BatchNorm2d(out, **on),
                )

        def forward(self, x: Tensor) -> Tensor:
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            y += x if self.downsample is None else self.downsample(x)  # in place, as torchvision
            out: Tensor = self.relu(y)
            return out

    return Bottleneck


@functools.cache
def _resnet() -> Any:
    """The ResNet module class (defined once torch is imported)."""
    from torch import Tensor, nn

    class ResNet(nn.Module):
        def __init__(self, device: Any = None) -> None:
            super().__init__()
            on = {"device": device}
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False, **on)
            self.bn1 = nn.BatchNorm2d(64, **on)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1, self.layer2, self.layer3, self.layer4 = _stages(device)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(WIDTHS[-1] * EXPANSION, NUM_CLASSES, **on)
            init_weights(self)

        def forward(self, x: Tensor) -> Tensor:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            out: Tensor = self.fc(self.avgpool(x).flatten(1))
            return out

    def _stages(device: Any) -> list[nn.Sequential]:
        """layer1..layer4: the bottlenecks of each stage, the first of stages 2-4 strided."""
        stages, inplanes = [], 64
        for i, (blocks, planes) in enumerate(zip(LAYERS, WIDTHS, strict=True)):
            stage = []
            for b in range(blocks):
                stride = 2 if i > 0 and b == 0 else 1
                stage.append(_bottleneck()(inplanes, planes, stride, device))
                inplanes = planes * EXPANSION
            stages.append(nn.Sequential(*stage))
        return stages

    return ResNet


def init_weights(model: Any) -> None:
    """torchvision's initialisation: He-normal (fan_out) convolutions, BN weight 1 bias 0."""
    from torch import nn

    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def resnet50(device: Any = None) -> Any:
    """A fresh ResNet-50 (1000 classes) on `device` (torch's default device when None)."""
    return _resnet()(device)
