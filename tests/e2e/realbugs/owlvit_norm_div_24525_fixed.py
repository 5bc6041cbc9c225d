# Report: https://github.com/huggingface/transformers/issues/24525 -- the fix of PR #24529:
# divide out of place.
import torch
import torch.nn as nn

torch.manual_seed(0)
dense0 = nn.Linear(8, 6)
image_embeds = torch.randn(2, 5, 8)
query_embeds = torch.randn(2, 3, 6, requires_grad=True)
image_class_embeds = dense0(image_embeds)
image_class_embeds = image_class_embeds / (torch.linalg.norm(image_class_embeds, dim=-1, keepdim=True) + 1e-6)
pred_logits = torch.einsum("...pd,...qd->...pq", image_class_embeds, query_embeds)
loss = pred_logits.sum()
loss.backward()
