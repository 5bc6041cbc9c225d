# Report: https://github.com/thuanz123/enhancing-transformers/issues/11
# PyTorch raises at loss.backward(): one of the variables needed for gradient
# computation has been modified by an inplace operation: [torch.FloatTensor [2, 4, 8]],
# which is output 0 of AsStrided, is at version 2; expected version 1 instead.
# Cause (trimmed from enhancing/modules/stage1/layers.py, ViTDecoder.forward): the
# decoder adds its position embedding to its argument in place (`token += ...`); a
# first decoder's layers saved that argument (quant), the second decoder's += writes
# it. The fix given in the thread: token = token + self.de_pos_embedding.
import torch
import torch.nn as nn


class ViTDecoder(nn.Module):
    def __init__(self, num_patches, dim, channels):
        super().__init__()
        self.de_pos_embedding = nn.Parameter(torch.randn(1, num_patches, dim),
                                             requires_grad=False)
        self.norm = nn.LayerNorm(dim)
        self.to_pixel = nn.Linear(dim, channels)

    def forward(self, token):
        token += self.de_pos_embedding
        x = self.norm(token)
        return self.to_pixel(x)


torch.manual_seed(0)
encoder = nn.Linear(6, 8)
decoder_a = ViTDecoder(4, 8, 3)
decoder_b = ViTDecoder(4, 8, 5)
quant = encoder(torch.randn(2, 4, 6))
rec_a = decoder_a(quant)
rec_b = decoder_b(quant)
loss = rec_a.square().mean() + rec_b.square().mean()
loss.backward()
