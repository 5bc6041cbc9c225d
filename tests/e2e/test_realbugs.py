"""Real-world autograd bugs, reproduced from public reports: each script in
tests/e2e/realbugs/ is a trimmed CPU copy of one report (its header cites the
URL and the error PyTorch raises). Each is recorded, diagnosed with --json,
and checked as a user would read the answer: the kind, the variable's name,
the line that saved it, the line(s) that modified it with the versions, the
finding marked first to fail agreeing with PyTorch's message, and the fix —
applied to a copy of the script (or given as the *_fixed.py variant of the
report's fix), which must then run without error; a fixed variant must
record with no finding at all.

Env: GRADTRACE (the built command), GT_SOURCE_DIR, GT_BUILD_DIR.
"""
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gtutil  # noqa: E402

DIR = os.path.join(gtutil.HERE, "realbugs")


def path(name):
    return os.path.join(DIR, name + ".py")


def line_of(name, code):
    """1-based line of the first code line of script `name` containing `code`
    (a pair (code, n): the n-th such line)."""
    code, n = code if isinstance(code, tuple) else (code, 1)
    with open(path(name)) as f:
        for i, l in enumerate(f, 1):
            if code in l and not l.lstrip().startswith("#"):
                n -= 1
                if not n:
                    return i
    raise AssertionError((name, code))


# script: what the diagnosis must say. kind; names: the variable (saved or
# leaf or view) must carry all of these; saved: code of the line whose op
# saved it; mutations: [(code of the writing line, version after)]; raised:
# code of the raising line (kinds raised at the op); fix: a piece the
# suggestion must contain; fixed: the *_fixed.py variant that applies it,
# or apply=True: the suggestion's `code` replaces the line it names (or
# goes after it); fix_at: code of the line the suggestion names; needed_at:
# code of the line of the backward() (or autograd.grad) that needed it.
CASES = {
    "gan_step_39141": dict(
        kind="inplace_invalidated_saved", names=["D.2.weight"],
        saved="prob_artist1 = D(G_paintings)", mutations=[("opt_D.step()", 2)],
        matches=True, fix="move optimizer.step() after the last backward()",
        fixed="gan_step_39141_fixed"),
    "srgan_both_steps_89": dict(
        kind="inplace_invalidated_saved", names=["netD.3.weight"],
        saved="fake_out = torch.sigmoid(netD(fake_img))",
        mutations=[("optimizerD.step()", 2)], matches=True,
        fix="move optimizer.step() after the last backward()"),
    "attn_gamma_step_62": dict(
        kind="inplace_invalidated_saved", names=["D.gamma"],
        saved="out = self.gamma * out + x", mutations=[("opt.step()", 1)],
        matches=True, fix="move optimizer.step() after the last backward()"),
    "resnet_residual_807": dict(
        kind="inplace_invalidated_saved", names=["out"], saved="out = self.relu(out)",
        mutations=[("out += identity", 2)], matches=True,
        fix="`out = out + (identity)`", fixed="resnet_residual_807_fixed"),
    "ernet_residual_3": dict(
        kind="inplace_invalidated_saved", names=["out"],
        saved="out = self.relu(self.conv1(x))", mutations=[("out += residual", 1)],
        matches=True, fix="`out = out + (residual)`", apply=True),
    "sigmoid_assign_9391": dict(
        kind="inplace_invalidated_saved", names=["b"], saved="b = a.sigmoid()",
        mutations=[("b[1] = 2", 1)], matches=True, fix="b = b.clone()",
        fixed="sigmoid_assign_9391_fixed"),
    "sigmoid_clamp_20": dict(
        kind="inplace_invalidated_saved", names=["pred"], saved="pred = torch.sigmoid(logits)",
        mutations=[("pred.clamp_(", 1)], matches=True,
        fix="`pred = pred.clamp(min=1e-4, max=1 - 1e-4)`", apply=True),
    "bernoulli_twice_11192": dict(
        kind="backward_twice", saved="l1 = 2 * pi.log_prob", freed_by="l1.backward()",
        needed_by="l2.backward()", matches=True, fix="retain_graph=True",
        fixed="bernoulli_twice_11192_fixed"),
    "bigram_twice_31": dict(
        kind="backward_twice", saved="loss = -prob[", freed_by="loss.backward()",
        needed_by="loss.backward()", matches=True,
        fix="move the lines that compute the loss inside the loop"),
    "manual_sgd_779": dict(
        kind="leaf_inplace", names=["model.weight", "p"], raised="p.add_(p.grad",
        fix="`with torch.no_grad(): p.add_(p.grad, alpha=-lr)`",
        fixed="manual_sgd_779_fixed"),
    "conv_weight_slice_61": dict(
        kind="leaf_inplace", names=["cconv.weight"], raised="cconv.weight[:, :, :, :] = W",
        fix="with torch.no_grad():", apply=True),
    "emb_copy_26": dict(
        kind="leaf_inplace", names=["self.emb.weight"], raised="self.emb.weight.copy_",
        fix="`with torch.no_grad(): self.emb.weight.copy_(init_emb)`", apply=True),
    "unbind_inplace_36608": dict(
        kind="view_multi_output_inplace", raised="v1[0].mul_(2)", view_origin="x.unbind()",
        matches=True, fix="`v1 = [v.clone() for v in v1]` after", apply=True,
        fixed="unbind_inplace_36608_fixed"),
    "nograd_view_103185": dict(
        kind="view_no_grad_inplace", names=["v"], raised="v.mul_(2)",
        view_origin="v = h[:2]", fix="move `v.mul_(2)` inside that block"),
    "custom_fn_view_15": dict(
        kind="view_custom_function_inplace", names=["c"], raised="c.mul_(0.5)",
        view_origin="return x[:, :2]", fix="c = c.clone() after",
        fix_at="c = Crop.apply(h)"),
    "param_relu_503": dict(
        kind="leaf_inplace", raised="weight = self.weight_relu(self.weight)",
        fix="use inplace=False", fixed="param_relu_503_fixed"),
    "chunk_clamp_13": dict(
        kind="view_multi_output_inplace", names=["log_stds"], raised="log_stds.clamp_(-20, 2)",
        view_origin="means, log_stds = self.net(states).chunk(2, dim=-1)", matches=True,
        fix="`log_stds = log_stds.clamp(-20, 2)`", apply=True, fixed="chunk_clamp_13_fixed"),
    # the state fed back into the next batch: the fix detaches it, after
    # the line that makes it (not "move the loss into the loop")
    "rnn_hidden_twice_62": dict(
        kind="backward_twice", saved="out, hx = rnn(x, hx)", freed_by="loss.backward()",
        needed_by="loss.backward()", matches=True, fix="`hx = hx.detach()` after",
        fix_at="out, hx = rnn(x, hx)", apply=True, fixed="rnn_hidden_twice_62_fixed"),
    # two tensors of state, detached in the outer loop only: both detached
    "lstm_state_outer_25": dict(
        kind="backward_twice", saved="h, c = cell(x, (h, c))", freed_by="loss.backward()",
        needed_by="loss.backward()", matches=True, fix="`h, c = h.detach(), c.detach()` after",
        fix_at="h, c = cell(x, (h, c))", apply=True),
    # the state is a tuple no tensor variable holds: detached as a tuple
    "lstm_repackage_42": dict(
        kind="backward_twice", saved="output, hidden = self.rnn(emb, hidden)",
        freed_by="loss.backward()", needed_by="loss.backward()", matches=True,
        fix="`hidden = tuple(s.detach() for s in hidden)` after",
        fix_at="output, hidden = self.rnn(emb, hidden)", apply=True,
        fixed="lstm_repackage_42_fixed"),
    # the same with retain_graph=True: the step is not what to move; the
    # GRU's 4 time steps each saved the weight: one finding, said 4 times
    "rnn_hidden_retain_62": dict(
        findings=1, repeats=4,
        kind="inplace_invalidated_saved", names=["rnn.weight_hh_l0"],
        saved="out, hx = rnn(x, hx)", mutations=[("opt.step()", 2)], matches=True,
        fix="`hx = hx.detach()` after", fix_at="out, hx = rnn(x, hx)", apply=True),
    # Softplus saves a view of b and the assignment writes b on one line:
    # no clone of b fits between them
    "softplus_slice_114505": dict(
        kind="inplace_invalidated_saved", names=["b"],
        saved="b[:, 1] = torch.nn.Softplus()(b[:, 0])",
        mutations=[("b[:, 1] = torch.nn.Softplus()(b[:, 0])", 2)], matches=True,
        fix="append .clone() to the argument it reads (`b[:, 0].clone()`)",
        fixed="softplus_slice_114505_fixed"),
    # a leaf made by requires_grad_() that takes a value with a gradient:
    # no_grad would drop img's gradient
    "embeds_index_copy_178": dict(
        kind="leaf_inplace", names=["inputs_embeds"], raised="flat.index_copy_(0, row_idx, img)",
        view_origin="flat = inputs_embeds.view(", fix="`flat = flat.index_copy(0, row_idx, img)`",
        apply=True, fixed="embeds_index_copy_178_fixed"),
    # two writes through views of the ReLU's output: both lines rewritten
    # the views' names are the views', not the saved base's; the clone
    # alternative says where it goes
    "spline_slice_div_89": dict(
        kind="inplace_invalidated_saved", names=["transform_params"],
        not_names=["unnormalized_widths", "unnormalized_heights", "unnormalized_derivatives"],
        written_views=[("unnormalized_widths", "transform_params"),
                       ("unnormalized_heights", "transform_params")],
        alt=("transform_params = transform_params.clone()", "after",
             "transform_params = transform_net("),
        saved="transform_params = transform_net(",
        mutations=[("unnormalized_widths /=", 1), ("unnormalized_heights /=", 2)],
        matches=True,
        fix="`unnormalized_heights = unnormalized_heights / (np.sqrt(hidden_features))`",
        apply="all", fixed="spline_slice_div_89_fixed"),
    # the written column's leaf, not the one the right-hand side views; the
    # next line writes it too (it never ran): no_grad covers both
    "weight_col_sub_14": dict(
        kind="leaf_inplace", names=["dense.weight"], raised="dense.weight[:, pos] -= ori_pred_emb",
        view_origin="dense.weight[:, pos] -= ori_pred_emb",
        fix="`with torch.no_grad(): dense.weight[:, pos] -= ori_pred_emb * 1.0; "
            "dense.weight[:, pos] += tgt_emb * 8.0` in place of lines", apply=True),
    # --- reports added with the merge of identical findings ---
    # `out = x` is no copy: four quadrant writes into out change x, which a
    # convolution and the ReLU saved; the copy goes before the first write
    "csb_alias_3": dict(
        kind="inplace_invalidated_saved", names=["x", "out"], saved="down_b = drb(x)",
        mutations=[("out[:, :, :h, :w] = f_all[:, :c]", 2),
                   ("out[:, :, h:, :w] = f_all[:, c:2 * c]", 3),
                   ("out[:, :, :h, w:] = f_all[:, 2 * c:3 * c]", 4),
                   ("out[:, :, h:, w:] = f_all[:, 3 * c:]", 5)], matches=True,
        fix="out = out.clone() before",
        alt=("out = out.clone()", "before", "out[:, :, :h, :w] = f_all[:, :c]"),
        fixed="csb_alias_3_fixed"),
    # nn.Dropout(inplace=True) after nn.ReLU(): its mul_ is no activation's,
    # the module is named from the stack
    "dropout_inplace_6": dict(
        kind="inplace_invalidated_saved", saved="return self.main(x)",
        mutations=[("return self.main(x)", 1)], matches=True,
        fix="use inplace=False: the nn.Dropout called at",
        fix_lines=[("built with inplace=True at", "nn.Dropout(dropout, inplace=True)")],
        fixed="dropout_inplace_6_fixed"),
    # four border writes into a ReLU's output: one clone before the first
    "att_border_9": dict(
        kind="inplace_invalidated_saved", names=["att"], saved="att = torch.relu(self.conv(x))",
        mutations=[("att[:, :, :, 0] = 0", 1), ("att[:, :, :, -1] = 0", 2),
                   ("att[:, :, 0, :] = 0", 3), ("att[:, :, -1, :] = 0", 4)], matches=True,
        fix="att = att.clone() before", alt=("att = att.clone()", "before", "att[:, :, :, 0] = 0"),
        fixed="att_border_9_fixed"),
    # a new loss each iteration, through a value made once (in __init__, or
    # before the loop, or kept from an earlier update): not "move the loss
    # into the loop"
    "exp_param_init_13": dict(
        kind="backward_twice", saved="self.length_scale = torch.exp(", freed_by="loss.backward()",
        needed_by="loss.backward()", matches=True,
        fix="the new loss reuses self.length_scale, made at",
        fix2="compute it in forward(), not in __init__()", fixed="exp_param_init_13_fixed"),
    "conv_outside_loop_109": dict(
        kind="backward_twice", saved="data = to_input(raw)", freed_by="loss.backward()",
        needed_by="loss.backward()", matches=True, fix="the new loss reuses data, made at",
        alt=("data = data.detach()", "after", "data = to_input(raw)"),
        fixed="conv_outside_loop_109_fixed"),
    "reinforce_resample_151": dict(
        kind="backward_twice", saved="policy.saved_log_probs.append(m.log_prob(action))",
        freed_by="policy_loss.backward()", needed_by="policy_loss.backward()", matches=True,
        fix="make it again for each backward()", fixed="reinforce_resample_151_fixed"),
    # an actor's loss runs the critic; the critic's step comes first: the
    # fix names the forward that saved it and the backward that needs it,
    # and orders the updates: the actor's backward (and step) first
    "maddpg_order_27": dict(
        kind="inplace_invalidated_saved", names=["critic.2.weight"],
        saved="actor_loss = -critic(", mutations=[("critic_optim.step()", 2)], matches=True,
        fix="move optimizer.step() after the last backward()",
        fix_lines=[("after the forward at", "actor_loss = -critic("),
                   ("and the backward() at", "actor_loss.backward()"),
                   ("order the updates: `actor_loss.backward()` at", "actor_loss.backward()"),
                   ("its step first, then `critic_optim.step()` at", "critic_optim.step()")],
        fixed="maddpg_order_27_fixed"),
    # detach() shares y's storage and version counter: written through it
    "detach_clip_exp": dict(
        kind="inplace_invalidated_saved", names=["y"], not_names=["shown"], saved="y = x.exp()",
        mutations=[("shown[shown > 2] = 2", 1)], written_views=[("shown", "y")], matches=True,
        fix="shown = shown.clone() before",
        alt=("shown = shown.clone()", "before", "shown[shown > 2] = 2"),
        fixed="detach_clip_exp_fixed"),
    # --- reports added by realbugs5 ---
    # `x /= norm(x)`: the norm saved x, the division writes it, on one line
    "owlvit_norm_div_24525": dict(
        kind="inplace_invalidated_saved", names=["image_class_embeds"],
        saved="image_class_embeds /= torch.linalg.norm(",
        mutations=[("image_class_embeds /= torch.linalg.norm(", 1)], matches=True,
        fix="`image_class_embeds = image_class_embeds / (torch.linalg.norm(", apply=True,
        fixed="owlvit_norm_div_24525_fixed"),
    # a recurrence written into rows of one preallocated tensor: each step's
    # product saved the row before; the last step's is the first to fail
    "recurrence_slice_36470": dict(
        kind="inplace_invalidated_saved", names=["f"], saved="f[i] = f[i - 1] * x",
        mutations=[("f[i] = f[i - 1] * x", 18), ("f[i] = 1 / (1.0 + torch.exp(-f[i]))", 19)],
        matches=True, fix="append .clone() to the argument it reads (`f[i - 1].clone()`)",
        fixed="recurrence_slice_36470_fixed"),
    # `laterals[i - 1] += ...`: a ReLU's output, held in a list; the list's
    # slot is rebound (a tensor's slice would not be)
    "fpn_laterals_4": dict(
        kind="inplace_invalidated_saved",
        saved="laterals = [conv(inputs[i]) for i, conv in enumerate(lateral_convs)]",
        mutations=[("laterals[i - 1] += F.interpolate(", 1)], matches=True,
        fix="`laterals[i - 1] = laterals[i - 1] + (F.interpolate(", apply=True,
        alt=("laterals[i - 1] = laterals[i - 1].clone()", "before",
             "laterals[i - 1] += F.interpolate("),
        fixed="fpn_laterals_4_fixed"),
    # a sum of losses carried into the second pass: `loss += ...` adds onto
    # the sum the first backward() freed; the fix starts a new sum
    "sam_loss_accum_10": dict(
        kind="backward_twice", saved="return F.mse_loss(output[:, t], target[:, t])",
        freed_by="loss.backward()", needed_by=("loss.backward()", 2),
        matches=True, fix="start a new sum for each backward(): `loss = 0` after",
        fix_at="loss.backward()", apply=True, fixed="sam_loss_accum_10_fixed"),
    # --- reports added by realbugs6 ---
    # GNN max aggregation: scatter_reduce(amax) saves its result, the bias
    # is added to it in place; the clone goes after the call's last line
    "gnn_max_bias_8953": dict(
        kind="inplace_invalidated_saved", names=["out"], saved="out = out.scatter_reduce(",
        mutations=[("out += self.bias", 1)], matches=True, fix="`out = out + (self.bias)`",
        apply=True, alt=("out = out.clone()", "after", "include_self=False)",
                         "out = out.scatter_reduce("),
        fixed="gnn_max_bias_8953_fixed"),
    # a module's buffer, written in forward, saved by the product of the
    # call before: named as the buffer; the copy is of the name forward()
    # uses (self.buf), before the line that writes it
    "buffer_sync_twice_22095": dict(
        kind="inplace_invalidated_saved", names=["mod.buf"],
        saved="return (self.lin(z) * self.buf).sum()",
        mutations=[("self.buf.copy_(self.synced)", 2)], matches=True,
        fix="update a copy: `self.buf = self.buf.clone()` before",
        alt=("self.buf = self.buf.clone()", "before", "self.buf.copy_(self.synced)"),
        fixed="buffer_sync_twice_22095_fixed"),
    # the same with the buffer redrawn by normal_() inside the expression
    # that saves it; two buffers, one finding each
    "noisy_buffer_normal_11742": dict(
        findings=2, kind="inplace_invalidated_saved", names=["layer.eps_bias"],
        saved="bias = self.bias + self.noise2", matches=True,
        mutations=[("bias = self.bias + self.noise2", 2)],
        fix="update a copy: `self.eps_bias = self.eps_bias.clone()` before",
        fix_at="bias = self.bias + self.noise2", fixed="noisy_buffer_normal_11742_fixed"),
    # WGAN-GP: the gradient penalty's autograd.grad(create_graph=True) is
    # the backward that needs the in-place LeakyReLU's output, which the
    # in-place Dropout scaled (PyTorch calls the node LeakyRelu1)
    "wgan_gp_dropout_1": dict(
        kind="inplace_invalidated_saved", saved="x = self.first_conv(x)",
        mutations=[("x = self.first_conv(x)", 2)], matches=True,
        needed_at="gradients = autograd.grad(",
        fix="use inplace=False: the nn.Dropout called at",
        fix_lines=[("built with inplace=True at", "nn.Dropout(p=0.5, inplace=True)")],
        fixed="wgan_gp_dropout_1_fixed"),
    # forward(token) adds in place to its argument, which another module
    # saved: the clone is of the argument's name there, not the caller's
    "vit_decoder_pos_11": dict(
        kind="inplace_invalidated_saved", names=["quant", "token"],
        saved="x = self.norm(token)", mutations=[("token += self.de_pos_embedding", 2)],
        matches=True, fix="`token = token + (self.de_pos_embedding)`", apply=True,
        alt=("token = token.clone()", "before", "token += self.de_pos_embedding")),
    # one tensor rewritten on each pass (detach_() then copy_()): the copy
    # goes before the pass's first in-place line, the detach_() (a clone
    # before the copy_() would be detached in place by the next pass)
    "copy_into_reused_15115": dict(
        kind="inplace_invalidated_saved", names=["x"], saved="loss += (x * x).sum()",
        mutations=[("x.copy_(new_calc)", 3)], matches=True,
        fix="modify a copy: x = x.clone() before",
        alt=("x = x.clone()", "before", "x.detach_()"),
        fixed="copy_into_reused_15115_fixed"),
    # a slice written with its own product: the product saved the slice
    "slice_times_view_55980": dict(
        kind="inplace_invalidated_saved", names=["x"], saved="x[0, :, 0, 0] = x[0, :, 0, 0] * var",
        mutations=[("x[0, :, 0, 0] = x[0, :, 0, 0] * var", 1)], matches=True,
        fix="append .clone() to the argument it reads (`x[0, :, 0, 0].clone()`)",
        fixed="slice_times_view_55980_fixed"),
}

FIXED_ONLY = ["gan_step_39141_fixed", "resnet_residual_807_fixed",
              "sigmoid_assign_9391_fixed", "bernoulli_twice_11192_fixed",
              "manual_sgd_779_fixed", "unbind_inplace_36608_fixed", "param_relu_503_fixed",
              "chunk_clamp_13_fixed", "rnn_hidden_twice_62_fixed", "softplus_slice_114505_fixed",
              "embeds_index_copy_178_fixed", "spline_slice_div_89_fixed",
              "lstm_repackage_42_fixed", "csb_alias_3_fixed", "dropout_inplace_6_fixed",
              "att_border_9_fixed", "exp_param_init_13_fixed", "conv_outside_loop_109_fixed",
              "reinforce_resample_151_fixed", "maddpg_order_27_fixed",
              "detach_clip_exp_fixed", "owlvit_norm_div_24525_fixed",
              "recurrence_slice_36470_fixed", "fpn_laterals_4_fixed",
              "sam_loss_accum_10_fixed", "gnn_max_bias_8953_fixed",
              "buffer_sync_twice_22095_fixed", "noisy_buffer_normal_11742_fixed",
              "wgan_gp_dropout_1_fixed", "copy_into_reused_15115_fixed",
              "slice_times_view_55980_fixed"]


def diagnose(trace):
    cp = subprocess.run([gtutil.GRADTRACE, "diagnose", "--json", trace],
                        capture_output=True, text=True, timeout=120)
    return cp.returncode, json.loads(cp.stdout)


def first_way(suggestion):
    """The suggestion's first fix, before its alternatives (", or ...")."""
    return suggestion.split(", or ")[0]


def apply_fix(name, suggestion):
    """The script's lines, the suggestion's first `code`, and the line it is
    about (named by `path:N` in the suggestion; None: the raising line)."""
    suggestion = first_way(suggestion)
    code = re.findall(r"`([^`]+)`", suggestion)
    assert code, suggestion
    m = re.search(re.escape(name) + r"\.py:(\d+)", suggestion)
    with open(path(name)) as f:
        lines = f.read().split("\n")
    return lines, code[0], (int(m.group(1)) if m else None)


class RealBugs(unittest.TestCase):
    results = {}

    @classmethod
    def setUpClass(cls):
        for name in list(CASES) + FIXED_ONLY:
            trace, cp = gtutil.record(path(name), expect_fail=name in CASES,
                                      options=("-q",))
            cls.results[name] = (cp,) + diagnose(trace)

    def first(self, name):
        cp, rc, d = self.results[name]
        self.assertEqual(rc, 1, d)
        firsts = [f for f in d["findings"] if f["first_to_fail"]]
        self.assertEqual(len(firsts), 1, d["findings"])
        return firsts[0], d

    def check_case(self, name):
        c = CASES[name]
        f, d = self.first(name)
        self.assertEqual(f["kind"], c["kind"], name)
        if "matches" in c:
            self.assertIs(f["matches_error"], c["matches"], name)
        if "findings" in c:
            self.assertEqual(len(d["findings"]), c["findings"], (name, d["findings"]))
        if "repeats" in c:
            self.assertEqual(f["repeats"], c["repeats"], name)
        names = (f.get("saved") or f.get("leaf") or f.get("view") or {}).get("names") or []
        for n in c.get("names", []):
            self.assertIn(n, names, (name, f))
        for n in c.get("not_names", []):
            self.assertNotIn(n, names, (name, f))
        if "written_views" in c:
            got = [(m["names"][0], (m.get("view_of") or [None])[0]) for m in f["mutations"]]
            self.assertEqual(got, c["written_views"], name)
        if f["kind"] == "backward_twice":  # a freed graph's version is not read
            self.assertIsNone(f["saved"]["saved_version"], name)
        if "alt" in c:  # the other fix: `code` after/before path:N, applied
            code, how, at = c["alt"][:3]
            # (the indentation of the statement's first line, when N is a
            # later line of it)
            first = c["alt"][3] if len(c["alt"]) > 3 else at
            m = re.search("`?" + re.escape(code) + "`? " + how + r" \S*" + re.escape(name) +
                          r"\.py:(\d+)", f["suggestion"])
            self.assertTrue(m, f["suggestion"])
            line = int(m.group(1))
            self.assertEqual(line, line_of(name, at), f["suggestion"])
            with open(path(name)) as fh:
                lines = fh.read().split("\n")
            old = lines[line_of(name, first) - 1]
            lines.insert(line if how == "after" else line - 1,
                         old[:len(old) - len(old.lstrip())] + code)
            self.run_applied(name, lines, code)
        if "saved" in c:
            self.assertEqual(f["node"]["location"]["line"], line_of(name, c["saved"]), name)
        if "mutations" in c:
            got = [(m["location"]["line"], m["version_after"]) for m in f["mutations"]]
            want = [(line_of(name, code), v) for code, v in c["mutations"]]
            self.assertEqual(got, want, name)
        if "needed_at" in c:  # the backward (or autograd.grad) that needs it
            self.assertEqual(f["backward"]["location"]["line"], line_of(name, c["needed_at"]))
        if "raised" in c:
            self.assertEqual(f["location"]["line"], line_of(name, c["raised"]), name)
        if "view_origin" in c:
            self.assertEqual(f["view"]["origin"]["location"]["line"],
                             line_of(name, c["view_origin"]), (name, f["view"]))
        if "freed_by" in c:
            self.assertEqual(f["freed_by"]["location"]["line"], line_of(name, c["freed_by"]))
            self.assertEqual(f["backward"]["location"]["line"], line_of(name, c["needed_by"]))
        if "fix" in c:
            self.assertIn(c["fix"], f["suggestion"], name)
        for what, code in c.get("fix_lines", []):  # "what path:N" names that line
            m = re.search(re.escape(what) + r" \S*" + re.escape(name) + r"\.py:(\d+)",
                          f["suggestion"])
            self.assertTrue(m, (what, f["suggestion"]))
            self.assertEqual(int(m.group(1)), line_of(name, code), f["suggestion"])
        if "fix2" in c:
            self.assertIn(c["fix2"], f["suggestion"], name)
        if "fix_at" in c:
            m = re.search(re.escape(name) + r"\.py:(\d+)", f["suggestion"])
            self.assertEqual(int(m.group(1)), line_of(name, c["fix_at"]), f["suggestion"])
        if c.get("apply"):
            self.check_apply(name, c, f)
        # the error PyTorch raised is the run's error, and the traceback is the script's
        cp = self.results[name][0]
        self.assertIn("Error", cp.stderr)

    def check_apply(self, name, c, f):
        if c["apply"] == "all":  # every `code` replaces the path:N before it
            sugg = first_way(f["suggestion"])
            at = [int(n) for n in re.findall(re.escape(name) + r"\.py:(\d+)", sugg)]
            codes = re.findall(r"`([^`]+)`", sugg)
            self.assertEqual(len(at), len(codes), sugg)
            with open(path(name)) as fh:
                lines = fh.read().split("\n")
            for line, code in zip(at, codes):
                old = lines[line - 1]
                lines[line - 1] = old[:len(old) - len(old.lstrip())] + code
            return self.run_applied(name, lines, codes)
        lines, code, line = apply_fix(name, f["suggestion"])
        span = re.search(r"in place of lines \S*" + re.escape(name) + r"\.py:(\d+)-(\d+)",
                         f["suggestion"])
        if span:  # the code replaces lines N-M
            a, b = int(span.group(1)), int(span.group(2))
            old = lines[a - 1]
            lines[a - 1:b] = [old[:len(old) - len(old.lstrip())] + code]
            return self.run_applied(name, lines, code)
        after = "` after " in first_way(f["suggestion"])
        if line is None:
            line = f["location"]["line"]
        old = lines[line - 1]
        indent = old[:len(old) - len(old.lstrip())]
        if after:  # a line to add after the one named
            lines.insert(line, indent + code)
        else:  # the line's replacement
            lines[line - 1] = indent + code
        self.run_applied(name, lines, code)

    def run_applied(self, name, lines, code):
        out = os.path.join(gtutil.tmpdir(), name + "_applied.py")
        with open(out, "w") as fh:
            fh.write("\n".join(lines))
        cp = gtutil.run_plain(out)
        self.assertEqual(cp.returncode, 0, (name, code, cp.stderr))

    def test_no_identical_findings(self):
        """No two findings of a diagnosis say the same thing: what the text
        shows, without row ids (those repeated are merged, with a count)."""
        def said(f):
            muts = [(m["op"], json.dumps(m["location"]), m["version_after"], m["names"])
                    for m in f.get("mutations") or []]
            return json.dumps([f["kind"], f.get("node") and f["node"]["name"],
                               f.get("node") and f["node"]["location"],
                               f.get("saved") and {k: f["saved"][k] for k in (
                                   "slot", "names", "shape", "saved_version",
                                   "version_at_backward")},
                               muts, f.get("backward") and f["backward"]["index"],
                               f.get("location"), f.get("suggestion")], sort_keys=True)
        for name in CASES:
            keys = [said(f) for f in self.results[name][2]["findings"]]
            self.assertEqual(len(keys), len(set(keys)), name)

    def test_fixed_variants_have_no_finding(self):
        for name in FIXED_ONLY:
            cp, rc, d = self.results[name]
            self.assertEqual(rc, 0, (name, d["findings"]))
            self.assertEqual(d["findings"], [], name)


for _name in CASES:
    setattr(RealBugs, "test_" + _name, lambda self, n=_name: self.check_case(n))

if __name__ == "__main__":
    unittest.main()
