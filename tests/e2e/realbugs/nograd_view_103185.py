# Report: https://github.com/pytorch/pytorch/pull/103185 (test_anomaly_gives_view_stack)
# and https://github.com/pytorch/pytorch/pull/32839
# PyTorch raises at v.mul_(2): A view was created in no_grad mode and is being
# modified inplace with grad mode enabled. ...
# Cause: a slice of an activation is taken under no_grad (e.g. for logging or a
# cache) and later scaled in place in the forward.
import torch

w = torch.randn(4, requires_grad=True)
h = w * 2
with torch.no_grad():
    v = h[:2]
v.mul_(2)
h.sum().backward()
