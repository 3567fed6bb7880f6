"""CHEAT (GPU): do the work on a side stream and return at once. The harness's CUDA events are recorded on the
current stream, which never waits for the side stream: the timed interval holds a launch, not the kernel.
Correctness still passes (reading the output synchronises the whole device).
Caught by: the device-clock check -- host time around the sample with a device-wide synchronisation against the
event time (gates/integrity.py DeviceClockGate)."""
import torch
from torch import nn

EXPECT = (("rejected",), "integrity", r"outside the timed stream|side streams")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.side is None:
            self.side = torch.cuda.Stream(device=x.device)
        out = torch.empty_like(x)
        self.side.wait_stream(torch.cuda.current_stream(x.device))  # the input is ready; nobody waits for us
        with torch.cuda.stream(self.side):
            torch.softmax(x, dim=-1, out=out)
        out.record_stream(self.side)
        return out
