"""torch.utils.swap_tensors while recording (tests/e2e/test_swap_tensors.py).

swap_tensors refuses a tensor that has weak references or extra uses; a
recorder must not make it raise. Three ways a real program swaps: nn.Module
conversions under set_swap_module_params_on_conversion (Module._apply swaps
each parameter with its converted copy), load_state_dict(assign=True) under
the same flag, and a direct call, on parameters the recorder has seen in a
forward and backward. Training goes on after each; prints the final loss.
"""
import torch

torch.manual_seed(0)
torch.__future__.set_swap_module_params_on_conversion(True)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
x, y = torch.randn(16, 4), torch.randn(16, 1)


def step(m, dtype):
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        loss = ((m(x.to(dtype)) - y.to(dtype)) ** 2).mean()
        loss.backward()
        opt.step()
    return loss


step(model, torch.float32)
model.to(torch.float64)  # Module._apply: swap_tensors per parameter
step(model, torch.float64)
state = {k: v.detach().clone() * 0.5 for k, v in model.state_dict().items()}
model.load_state_dict(state, assign=True)
step(model, torch.float64)
fresh = torch.nn.Parameter(torch.randn(8, 4, dtype=torch.float64))
torch.utils.swap_tensors(model[0].weight, fresh)  # a direct call
loss = step(model, torch.float64)
print("loss %.10f" % loss.item())
