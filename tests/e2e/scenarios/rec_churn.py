"""Allocates and frees 10,000 tensors; prints how many distinct data
pointers and object addresses they had (far fewer: memory is reused)."""
import torch

ptrs = set()
addrs = set()
for i in range(10000):
    t = torch.empty(4)
    ptrs.add(t.data_ptr())
    addrs.add(id(t))
    del t
print("ptrs", len(ptrs), "addrs", len(addrs))
