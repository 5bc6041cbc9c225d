"""A recommender with sparse gradients and the hooks training code adds:
nn.Embedding and nn.EmbeddingBag with sparse=True under SparseAdam next to a
dense Adam (two optimizers), a full backward hook and a backward pre-hook
that rescales the gradient, a forward pre-hook, tensor hooks on a weight and
on the prediction, no_grad evaluation in eval() mode between steps, and a
state dict saved and loaded mid-run. A correct run: gradtrace diagnose must
find nothing."""
import io
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Rec(nn.Module):
    def __init__(self):
        super().__init__()
        self.users = nn.Embedding(100, 8, sparse=True)
        self.items = nn.EmbeddingBag(60, 8, mode="mean", sparse=True)
        self.mlp = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))

    def forward(self, u, items, offsets):
        return self.mlp(torch.cat([self.users(u), self.items(items, offsets)], 1)).squeeze(1)


model = Rec()
grad_norms = []
model.mlp[0].register_full_backward_hook(lambda m, gi, go: grad_norms.append(go[0].norm().item()))
model.mlp[3].register_full_backward_pre_hook(lambda m, go: (go[0] * 0.5,))
model.mlp.register_forward_pre_hook(lambda m, args: (args[0] * 1.0,))
model.mlp[3].weight.register_hook(lambda g: g.clamp(-1, 1))
sparse_opt = torch.optim.SparseAdam(list(model.users.parameters()) + list(model.items.parameters()), lr=1e-2)
dense_opt = torch.optim.Adam(model.mlp.parameters(), lr=1e-2)
for step in range(6):
    model.train()
    u = torch.randint(0, 100, (16,))
    items = torch.randint(0, 60, (40,))
    offsets = torch.tensor([0, 3, 5, 6, 9, 10, 14, 17, 20, 22, 25, 28, 30, 33, 36, 38])
    y = torch.rand(16)
    pred = model(u, items, offsets)
    pred.register_hook(lambda g: g * 2)
    loss = F.mse_loss(pred, y)
    sparse_opt.zero_grad()
    dense_opt.zero_grad()
    loss.backward()
    sparse_opt.step()
    dense_opt.step()
    model.eval()
    with torch.no_grad():
        ev = F.mse_loss(model(u, items, offsets), y)
    print(step, repr(loss.item()), repr(ev.item()), repr(grad_norms[-1]))
    if step == 3:
        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)
        buf.seek(0)
        model.load_state_dict(torch.load(buf, weights_only=True))
print([repr(p.sum().item()) for p in model.parameters()])
