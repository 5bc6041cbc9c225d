# The fix of https://github.com/2U1/Qwen-VL-Series-Finetune/pull/178
# (embeds_index_copy_178.py): the out-of-place index_copy, flat = flat.index_copy(...).
import torch
import torch.nn as nn

torch.manual_seed(0)
embed = nn.Embedding(20, 6)
embed.weight.requires_grad_(False)
vision = nn.Linear(5, 6)
input_ids = torch.tensor([[1, 9, 9, 4], [3, 9, 2, 5]])
pixel_feats = torch.randn(3, 5)

inputs_embeds = embed(input_ids)
inputs_embeds.requires_grad_(True)
img = vision(pixel_feats)
flat = inputs_embeds.view(-1, inputs_embeds.shape[-1])
row_idx = (input_ids.view(-1) == 9).nonzero().squeeze(1)
flat = flat.index_copy(0, row_idx, img)
flat.sum().backward()
