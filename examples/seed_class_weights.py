"""The seed story: class weights updated in place between forward and backward.

A small classifier trained with a class-weighted loss. After the forward pass
the script re-balances the class weights from the batch's predictions, in
place, one class at a time, and only then calls backward(). The weights do not
require grad, but nll_loss saved them for its backward, so PyTorch raises:

    RuntimeError: one of the variables needed for gradient computation has
    been modified by an inplace operation: [torch.FloatTensor [3]] is at
    version 6; expected version 0 instead. ...

Record it and ask gradtrace which line did it:

    gradtrace record -o seed.db -- examples/seed_class_weights.py
    gradtrace diagnose seed.db

Pass --fixed to run the repaired version (update a clone().detach() copy).
"""
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(0)
fixed = "--fixed" in sys.argv

model = torch.nn.Sequential(
    torch.nn.Linear(4, 8),
    torch.nn.ReLU(),
    torch.nn.Linear(8, 3),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
class_weights = torch.FloatTensor([1.0, 2.0, 0.5])

for step in range(2):
    x = torch.randn(16, 4)
    target = torch.randint(0, 3, (16,))
    log_probs = F.log_softmax(model(x), dim=1)
    loss = F.nll_loss(log_probs, target, weight=class_weights)

    if fixed:
        class_weights = class_weights.clone().detach()
    predicted = log_probs.argmax(dim=1)
    for i in range(len(class_weights)):
        share = (predicted == i).float().mean()
        class_weights[i] *= 1.0 + share

    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
