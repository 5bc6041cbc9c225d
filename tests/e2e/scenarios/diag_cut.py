"""backward() of a tensor with no grad_fn ("element 0 of tensors does not
require grad and does not have a grad_fn"), one way per argument: the graph
cut by detach(), by .data, by a forward under torch.no_grad() (a block, a
decorated function), in torch.inference_mode(), by argmax and by a
comparison; a loss made from .item() numbers; a frozen model; data that
never required grad. The line that cut it ends with `# @<case>_cut`.
Prints "ok" when it runs through.
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
case = sys.argv[1]
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
x = torch.randn(6, 4)
target = torch.tensor([0, 1, 2, 0, 1, 2])


@torch.no_grad()
def predict(m, inp):
    return m(inp)  # @no_grad_fn_cut


if case == "detach":
    out = model(x)
    probs = F.softmax(out, dim=1).detach()  # @detach_cut
    loss = F.nll_loss(probs.log(), target)
    loss.backward()
elif case == "data":
    out = model(x)
    loss = F.cross_entropy(out.data, target)  # @data_cut
    loss.backward()
elif case == "no_grad":
    with torch.no_grad():
        out = model(x)  # @no_grad_cut
    loss = F.cross_entropy(out, target)
    loss.backward()
elif case == "no_grad_fn":
    out = predict(model, x)
    loss = F.cross_entropy(out, target)
    loss.backward()
elif case == "inference":
    with torch.inference_mode():
        feats = model[0](x)  # @inference_cut
    loss = feats.clone().pow(2).mean()
    loss.backward()
elif case == "argmax":
    out = model(x)
    pred = out.argmax(1).float()  # @argmax_cut
    loss = ((pred - target.float()) ** 2).mean()
    loss.backward()
elif case == "compare":
    out = model(x)
    hit = (out[:, 0] > 0).float()  # @compare_cut
    loss = hit.mean()
    loss.backward()
elif case == "item":
    total = 0.0
    for i in range(3):
        loss_i = F.cross_entropy(model(x), target)
        total += loss_i.item()  # @item_cut
    loss = torch.tensor(total / 3)  # @item_made
    loss.backward()
elif case == "numpy":
    # a dice loss computed in NumPy (kevinzakka/pytorch-goodies#11 and many)
    probs = torch.softmax(model(x), dim=1)
    onehot = F.one_hot(target, 3).float()
    p, t = probs.detach().numpy(), onehot.numpy()  # @numpy_cut
    loss = torch.tensor(1 - 2 * (p * t).sum() / (p.sum() + t.sum()))  # @numpy_made
    loss.backward()
elif case == "grad_unused":
    # autograd.grad over every parameter, one layer unused by this loss
    aux = nn.Linear(4, 1)  # @grad_unused_made
    params = list(model.parameters()) + list(aux.parameters())
    loss = F.cross_entropy(model(x), target)
    grads = torch.autograd.grad(loss, params)  # @grad_unused_call
elif case == "grad_no_req":
    w = torch.randn(4, 3, requires_grad=True)
    inp = torch.randn(6, 4)  # @grad_no_req_made
    out = (inp @ w).sum()
    g = torch.autograd.grad(out, inp)
elif case == "grad_late":
    # a WGAN-GP penalty whose interpolates get requires_grad after D ran
    alpha = torch.rand(6, 1)
    interp = alpha * x + (1 - alpha) * torch.randn(6, 4)  # @grad_late_made
    d = model(interp)  # @grad_late_cut
    interp.requires_grad_(True)
    g = torch.autograd.grad(d.sum(), interp, create_graph=True)[0]
elif case == "frozen":
    for p in model.parameters():
        p.requires_grad = False
    loss = F.cross_entropy(model(x), target)
    loss.backward()
elif case == "plain":
    w = torch.randn(4, 1)
    b = torch.zeros(1)
    loss = ((x @ w + b - 1.0) ** 2).mean()
    loss.backward()
print("ok")
