"""A correct 20-step training loop (MLP, SGD with momentum, then Adam);
prints each loss and the final parameters exactly (float.hex)."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
opt2 = torch.optim.Adam(model.parameters(), lr=0.01)
for step in range(20):
    x = torch.randn(16, 8)
    y = torch.randint(0, 4, (16,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    o = opt if step < 10 else opt2
    o.zero_grad()
    loss.backward()
    o.step()
    print(step, loss.item().hex())
for name, p in model.named_parameters():
    print(name, [v.hex() for v in p.detach().flatten().tolist()])
