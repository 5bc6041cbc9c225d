# Report: https://github.com/bayesiains/nflows/issues/89
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [8, 11]],
# which is output 0 of Relu, is at version 2; expected version 0 instead. ...
# Cause (trimmed from nflows' PiecewiseRationalQuadraticCoupling._piecewise_cdf):
# the spline's widths and heights are slices of the transform net's output (a ReLU's,
# which saved it) and are scaled in place with /=.
import numpy as np
import torch
import torch.nn as nn

num_bins, hidden_features = 4, 16
torch.manual_seed(0)
transform_net = nn.Sequential(nn.Linear(3, hidden_features), nn.Tanh(),
                              nn.Linear(hidden_features, 3 * num_bins - 1), nn.ReLU())
transform_params = transform_net(torch.randn(8, 3))
unnormalized_widths = transform_params[..., :num_bins]
unnormalized_heights = transform_params[..., num_bins:2 * num_bins]
unnormalized_derivatives = transform_params[..., 2 * num_bins:]
unnormalized_widths /= np.sqrt(hidden_features)
unnormalized_heights /= np.sqrt(hidden_features)
widths = torch.softmax(unnormalized_widths, dim=-1)
heights = torch.softmax(unnormalized_heights, dim=-1)
loss = (widths * heights).sum() + unnormalized_derivatives.sum()
loss.backward()
