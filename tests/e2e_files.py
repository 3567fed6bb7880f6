"""Small KernelBench-format problems and candidates for end-to-end plugin tests (CPU sizes: ~0.1-1 ms)."""

RELU = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.relu(x)

batch_size = 64
dim = 4096

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
'''

# ReLU whose inputs are non-negative: the identity is "correct" on them (a degenerate correctness check)
RELU_NONNEG = RELU.replace("torch.randn(batch_size, dim)", "torch.rand(batch_size, dim)")

SOFTMAX = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        e = torch.exp(x - x.max(dim=1, keepdim=True).values)
        return e / e.sum(dim=1, keepdim=True)

batch_size = 64
dim = 2048
AUTOTUNE_SIZES = {"cpu": {"batch_size": 32, "dim": 2048}}

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
'''

LINEAR = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
    def forward(self, x):
        return torch.relu(self.fc(x))

def get_inputs():
    return [torch.randn(64, 256)]

def get_init_inputs():
    return [256, 128]
'''

CAND_RELU_CLAMP = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return x.clamp_min(0.0)
'''

CAND_IDENTITY = '''
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return x
'''

CAND_RELU_BF16 = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.relu(x.to(torch.bfloat16)).to(torch.float32)
'''

CAND_SOFTMAX = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.softmax(x, dim=1)
'''

CAND_LINEAR = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
    def forward(self, x):
        return torch.addmm(self.fc.bias, x, self.fc.weight.t()).relu_()
'''

# broken files
BAD_SYNTAX = "import torch\nclass Model(:\n"
NO_MODEL = "import torch\n\ndef get_inputs():\n    return [torch.randn(4)]\n\ndef get_init_inputs():\n    return []\n"
INPUTS_RAISE = RELU.replace("return [torch.randn(batch_size, dim)]", "raise ValueError('broken inputs')")
CAND_NO_MODELNEW = "import torch\n\nclass Something:\n    pass\n"
CAND_BAD_SIGNATURE = CAND_LINEAR.replace("def __init__(self, in_features, out_features):", "def __init__(self):").replace(
    "nn.Linear(in_features, out_features)", "nn.Linear(256, 128)")
CAND_RETURNS_LIST = CAND_RELU_CLAMP.replace("return x.clamp_min(0.0)", "return [x.clamp_min(0.0).tolist()]")
