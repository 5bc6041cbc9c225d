"""A torch.compile'd function's output changed in place before backward (realcode4's compile_bug). Under
the engine adapter the compiled frame reports its first line (the decorator) for every op: diagnose says
the tensor was saved inside the compiled function `block`, called at the @call line, not at the decorator.
Under dispatch the code runs eagerly: "saved at" is the @save line."""
import torch
torch.manual_seed(0)
lin = torch.nn.Linear(4, 4)


@torch.compile(backend="aot_eager")
def block(x):
    return torch.sigmoid(lin(x))  # @save


x = torch.randn(3, 4)
y = block(x)  # @call
y.mul_(2)  # @mut
y.sum().backward()
