# The fix of https://github.com/pytorch/pytorch/issues/9391 (sigmoid_assign_9391.py):
# assign into a copy, b = b.clone(), so the saved sigmoid result stays intact.
import torch

a = torch.tensor([1, 2, 3.], requires_grad=True)
b = a.sigmoid()
b = b.clone()
b[1] = 2
b.sum().backward()
print(a.grad)
