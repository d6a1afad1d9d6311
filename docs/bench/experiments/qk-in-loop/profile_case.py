import os

import torch

from caovan.bench.cases import SpecDecodeCase, build_inputs
from caovan.kernels.gdn_spec_decode import gdn_spec_decode

head, b, m, dt = os.environ["CASE"].split(",")
case = SpecDecodeCase(head, num_seqs=int(b), num_spec_tokens=int(m), ssm_dtype=dt)
inp = build_inputs(case, "cuda")
args, kwargs = inp.kernel_args()
for _ in range(5):
    gdn_spec_decode(*args, **kwargs)
torch.cuda.synchronize()
