"""ResNet-18 with an in-place bug in one of its eight residual blocks.

A ResNet-18 written out by hand (the same layers as torchvision's). In one
of its eight blocks, layer3.1, the output of the first ReLU is scaled in
place (`out.mul_(0.5)`) after conv2 used it; conv2 saved that tensor for
its backward, so backward() raises:

    RuntimeError: one of the variables needed for gradient computation has
    been modified by an inplace operation ...

Record it and ask gradtrace which block and which line did it:

    gradtrace record -o resnet.db -- examples/resnet18_inplace.py
    gradtrace diagnose resnet.db
    gradtrace graph resnet.db -o resnet.png

Pass --fixed to run the repaired version (an out-of-place multiply).
"""
import sys

import torch
import torch.nn as nn

fixed = "--fixed" in sys.argv
torch.manual_seed(0)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1, buggy=False):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )
        self.buggy = buggy

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        y = self.conv2(out)
        if self.buggy and not fixed:
            out.mul_(0.5)  # conv2 saved `out`: backward needs it as it was
        out = self.bn2(y)
        if self.downsample is not None:
            identity = self.downsample(x)
        out = out + identity
        return self.relu(out)


class ResNet18(nn.Module):
    def __init__(self, classes=10, buggy_block=("layer3", 1)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = 64
        for i, (cout, stride) in enumerate([(64, 1), (128, 2), (256, 2), (512, 2)]):
            name = f"layer{i + 1}"
            blocks = [
                BasicBlock(cin, cout, stride, buggy=buggy_block == (name, 0)),
                BasicBlock(cout, cout, 1, buggy=buggy_block == (name, 1)),
            ]
            setattr(self, name, nn.Sequential(*blocks))
            cin = cout
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


model = ResNet18()
x = torch.randn(2, 3, 64, 64)
target = torch.randint(0, 10, (2,))
loss = nn.functional.cross_entropy(model(x), target)
loss.backward()
print("backward ok")
