"""CHEAT (GPU, protocol 9): do the work on a stream of its own while the timed stream is held by the head start, and
wait for it on the host. The inputs were ready at the sample's synchronisation, so the side stream need not wait for
the held one; the host's wait is meant to happen while the GPU would otherwise idle behind the hold, and the join
puts the result on the timed stream before its events can see the work.
Caught by: the hold itself -- it fills every SM (measure/devices/cuda/hold.py), so the side stream's kernel cannot
start before the release; the host's wait then runs into the hold's deadline and is in the sample's enqueue time,
which the sample counts (max(event, enqueue)). Expected: no gain (or refused)."""
import torch
from torch import nn

EXPECT = (("no-gain",), None, "")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.side is None:
            self.side = torch.cuda.Stream(device=x.device)
        out = torch.empty_like(x)
        with torch.cuda.stream(self.side):  # no wait on the held stream
            torch.softmax(x, dim=-1, out=out)
            done = torch.cuda.Event()
            done.record(self.side)
        while not done.query():  # wait on the host while the side stream works
            pass
        torch.cuda.current_stream(x.device).wait_stream(self.side)
        return out
