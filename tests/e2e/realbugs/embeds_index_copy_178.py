# Report: https://github.com/2U1/Qwen-VL-Series-Finetune/pull/178
# (same error: NVlabs/VILA#199)
# PyTorch raises at flat.index_copy_(0, row_idx, img): a view of a leaf Variable that
# requires grad is being used in an in-place operation.
# Cause (trimmed): with a frozen embedding and gradient checkpointing, the input
# embeddings are made to require grad (requires_grad_(True) on a tensor without
# history: a leaf); the image features are then written into a view of it in place.
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
flat.index_copy_(0, row_idx, img)
flat.sum().backward()
