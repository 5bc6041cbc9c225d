# Report: https://github.com/wutong16/DistributionBalancedLoss/issues/20
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [64, 109]],
# which is output 0 of SigmoidBackward0, is at version 1; expected version 0 instead.
# Cause (trimmed): a focal-style loss clamps the sigmoid probabilities in place.
import torch
import torch.nn.functional as F

torch.manual_seed(0)
logits = torch.randn(64, 109, requires_grad=True)
target = (torch.rand(64, 109) > 0.9).float()
pred = torch.sigmoid(logits)
pt = pred * target + (1 - pred) * (1 - target)
pred.clamp_(min=1e-4, max=1 - 1e-4)
loss = (-(1 - pt) ** 2 * torch.log(pt)).mean() + F.binary_cross_entropy(pred, target)
loss.backward()
