"""In-place mistakes inside functions transformed by torch.func in eager
mode (functorch's grad, vjp, jacrev, vmap(grad)), and correct transformed
functions. Each buggy case changes in place a tensor an op saved, inside the
transformed function; PyTorch fails the transform's backward with its usual
"modified by an inplace operation" error, which the script catches and
prints. The correct cases print their results. On PyTorch 1.13 the
transforms come from the separate functorch package."""
import torch

try:
    from torch.func import grad, jacfwd, jacrev, vjp, vmap
    FORWARD_AD = True
except ImportError:  # PyTorch 1.13
    from functorch import grad, jacfwd, jacrev, vjp, vmap
    # 1.13's forward-mode transforms fail under any TorchDispatchMode
    # (aten::alias handed a float), the one gradtrace records with: not run
    FORWARD_AD = False

torch.manual_seed(0)
target = torch.tensor([0.0, 1.0, 0.0, 0.0])
x = torch.randn(4)
batch = torch.randn(3, 4)


def run(case, fn):
    try:
        out = fn()
        print(f"{case}: {out}")
    except RuntimeError as e:
        print(f"{case} error: {e}")


# --- buggy: a saved tensor changed in place inside the transform ---------

def grad_loss(v):
    logits = v * 3.0
    probs = logits.softmax(0)  # @grad-save
    loss = (probs - target).pow(2).sum()
    probs.mul_(0.5)  # @grad-mut
    return loss


def vjp_fn(v):
    act = torch.sigmoid(v)  # @vjp-save
    act.clamp_(0.1, 0.9)  # @vjp-mut
    return act * 2.0


def jacrev_fn(v):
    hidden = torch.tanh(v)  # @jacrev-save
    out = hidden * 2.0
    hidden.add_(1.0)  # @jacrev-mut
    return out


def rescale(t):
    t.mul_(2.0)  # @helper-mut


def helper_loss(v):
    scores = v.exp()  # @helper-save
    total = scores.sum()
    rescale(scores)
    return total


def sample_loss(v):
    logp = torch.log_softmax(v, 0)  # @vmap-save
    loss = -(logp * target).sum()
    logp.sub_(1.0)  # @vmap-mut
    return loss


run("grad", lambda: grad(grad_loss)(x))  # @grad-bw
run("vjp", lambda: vjp(vjp_fn, x)[1](torch.ones(4)))  # @vjp-bw
run("jacrev", lambda: jacrev(jacrev_fn)(x))  # @jacrev-bw
run("helper", lambda: grad(helper_loss)(x))  # @helper-bw
run("vmap", lambda: vmap(grad(sample_loss))(batch))  # @vmap-bw


# --- correct: in-place changes of tensors no op saved -------------------

def good_loss(v):
    z = v * 2.0
    z.add_(1.0)  # mul by a number saves nothing of z
    probs = z.softmax(0)
    return (probs - target).pow(2).sum()


def good_fn(v):
    h = torch.tanh(v)
    h = h.clone()
    out = h * 3.0  # saves nothing of h (a number's other)
    h.add_(1.0)
    return out + v.sin()


run("ok-grad", lambda: grad(good_loss)(x))  # @ok-grad-bw
run("ok-vjp", lambda: vjp(good_fn, x)[1](torch.ones(4)))  # @ok-vjp-bw
run("ok-jacrev", lambda: jacrev(good_fn)(x))  # @ok-jacrev-bw
if FORWARD_AD:
    run("ok-jacfwd", lambda: jacfwd(good_fn)(x))
run("ok-vmap", lambda: vmap(grad(good_loss))(batch))  # @ok-vmap-bw
