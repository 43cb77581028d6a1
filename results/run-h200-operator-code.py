"""Issue 12: what Inductor generates around softmax_lab's masked operator in the fp16 attention block (why the
compiled block is not faster than eager): the lines of the generated forward that call the operator or copy."""
import math
import sys

import torch
from torch._inductor.utils import run_and_get_code

import softmax_lab

dev = torch.device("cuda")


class Attention(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

    def forward(self, x, mask):
        B, S, D = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // self.heads)
        return self.proj((softmax_lab.softmax(scores, -1, mask=mask) @ v).transpose(1, 2).reshape(B, S, D))


B, S, D, H = 4, 1024, 512, 8
block = Attention(D, H).to(dev, torch.float16)
x = torch.randn(B, S, D, device=dev, dtype=torch.float16)
causal = torch.ones(S, S, dtype=torch.bool, device=dev).tril()
with torch.no_grad():
    _, codes = run_and_get_code(torch.compile(block, fullgraph=True), x, causal)
for code in codes:
    for line in code.splitlines():
        if any(k in line for k in ("softmax_lab", "extern_kernels", "empty_strided", ".run(", "reinterpret", "copy", "def call")):
            print(line.strip()[:220])
