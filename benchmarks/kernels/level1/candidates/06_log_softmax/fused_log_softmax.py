"""ATen's log-softmax kernel: per row max, log-sum-exp and subtraction, no full-size temporaries."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=-1)
