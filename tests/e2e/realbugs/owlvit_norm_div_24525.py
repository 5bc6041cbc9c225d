# Report: https://github.com/huggingface/transformers/issues/24525 (fixed by PR #24529)
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [2, 5, 6]], which is output 0 of
# AsStrided, is at version 1; expected version 0 instead.
# Cause (trimmed from OwlViTClassPredictionHead.forward): the class embeddings are
# normalized with `/=` by their own norm; the norm saved them, the division writes them.
import torch
import torch.nn as nn

torch.manual_seed(0)
dense0 = nn.Linear(8, 6)
image_embeds = torch.randn(2, 5, 8)
query_embeds = torch.randn(2, 3, 6, requires_grad=True)
image_class_embeds = dense0(image_embeds)
image_class_embeds /= torch.linalg.norm(image_class_embeds, dim=-1, keepdim=True) + 1e-6
pred_logits = torch.einsum("...pd,...qd->...pq", image_class_embeds, query_embeds)
loss = pred_logits.sum()
loss.backward()
