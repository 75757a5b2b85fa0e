"""CUDA only: results agree with the CPU backend; gdn_attention and a functional op captured in a
CUDA graph and replayed with new inputs and metadata in the same buffers (decode and ragged verify
steps with acceptance) give the eager CPU results; the op runs on the caller's current stream."""

import pytest
import torch

import gdn_kernels
from conftest import requires_cuda
from golden import Case, bit_equal, golden_files, golden_ids, rel_l2, run_case
from samples import recurrent_args, to_device

pytestmark = requires_cuda

H, HV, K, V, W = 2, 4, 32, 16, 4
D = 2 * H * K + HV * V
COLS = 3          # verify columns (2 drafts + bonus)
N_DEC, N_SPEC = 3, 2
SLOTS = 16
ROWS = N_DEC + N_SPEC * COLS + 2  # graph-padded buffers: 2 rows past num_actual_tokens


@pytest.mark.parametrize("path", golden_files(), ids=golden_ids())
def test_cuda_agrees_with_cpu(path):
    case = Case(path)
    cpu, cuda = run_case(case, "cpu"), run_case(case, "cuda")
    for name, ref in cpu.items():
        if name.startswith("_"):
            continue
        if name in ("conv_state", "z"):
            assert bit_equal(cuda[name], ref), f"{case.name}: {name} must be bit-exact on both backends"
        else:
            tol = 1e-5 if ref.dtype == torch.float32 else 1e-2
            assert rel_l2(cuda[name], ref) <= tol, f"{case.name}: {name} CUDA vs CPU"


def make_layer(gen):
    f = torch.float32
    return dict(conv_weights=torch.randn(D, W, generator=gen, dtype=f) * 0.3,
                conv_bias=torch.randn(D, generator=gen, dtype=f) * 0.1,
                A_log=torch.randn(HV, generator=gen, dtype=f) * 0.5,
                dt_bias=torch.randn(HV, generator=gen, dtype=f) * 0.5)


def make_step(gen, step):
    """Inputs and metadata of one step: 3 decodes (one padded) and 2 ragged verify sequences."""
    qkvz = torch.randn(ROWS, D + HV * V, generator=gen)
    ba = torch.randn(ROWS, 2 * HV, generator=gen)
    lens = [COLS, 1 + step % COLS]
    spec_qsl = torch.tensor([0, lens[0], lens[0] + lens[1]], dtype=torch.int32)
    nat = torch.tensor([1 + (step + i) % COLS for i in range(N_SPEC)], dtype=torch.int32)
    spec_slots = torch.tensor([[8 + 3 * i + c for c in range(COLS)] for i in range(N_SPEC)], dtype=torch.int32)
    # Spec tokens come first in the global order, decodes after them (interleaving via remaps).
    n_spec_tok = int(spec_qsl[-1])
    spec_indx = torch.zeros(N_SPEC * COLS, dtype=torch.int32)
    spec_indx[:n_spec_tok] = torch.arange(n_spec_tok, dtype=torch.int32)
    dec_indx = torch.arange(n_spec_tok, n_spec_tok + N_DEC, dtype=torch.int32)
    dec_slots = torch.tensor([1, -1 if step % 2 else 2, 3], dtype=torch.int32)
    return dict(projected_states_qkvz=qkvz, projected_states_ba=ba,
                non_spec_query_start_loc=torch.arange(N_DEC + 1, dtype=torch.int32), non_spec_token_indx=dec_indx,
                non_spec_state_indices_tensor=dec_slots, spec_query_start_loc=spec_qsl, spec_token_indx=spec_indx,
                spec_state_indices_tensor=spec_slots, num_accepted_tokens=nat,
                num_actual_tokens=n_spec_tok + N_DEC)


def call(core, z, conv_state, ssm_state, layer, step, num_actual_tokens):
    gdn_kernels.gdn_attention(
        core, z, step["projected_states_qkvz"], step["projected_states_ba"], H, HV, K, V, conv_state, ssm_state,
        layer["conv_weights"], layer["conv_bias"], "silu", layer["A_log"], layer["dt_bias"], 0, N_DEC, N_SPEC, None,
        step["non_spec_query_start_loc"], step["non_spec_token_indx"], step["non_spec_state_indices_tensor"],
        step["spec_query_start_loc"], step["spec_token_indx"], step["spec_state_indices_tensor"],
        step["num_accepted_tokens"], num_actual_tokens, 1, True)


def test_cuda_graph_capture_and_replay_gdn_attention():
    gen = torch.Generator().manual_seed(7)
    layer = make_layer(gen)
    conv0 = torch.randn(SLOTS, W - 2 + COLS, D, generator=gen)
    ssm0 = torch.randn(SLOTS, HV, V, K, generator=gen) * 0.1
    nat_rows = N_DEC + N_SPEC * COLS  # the graph covers the largest step; smaller ones are padded by qsl

    dev = {k: v.cuda() for k, v in layer.items()}
    static = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in make_step(gen, 0).items()}
    core = torch.zeros(ROWS, HV, V, device="cuda")
    z = torch.zeros_like(core)
    conv_state, ssm_state = conv0.cuda(), ssm0.cuda()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, then restore the pools
        call(core, z, conv_state, ssm_state, dev, static, nat_rows)
    torch.cuda.current_stream().wait_stream(side)
    conv_state.copy_(conv0)
    ssm_state.copy_(ssm0)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(core, z, conv_state, ssm_state, dev, static, nat_rows)

    cpu_conv, cpu_ssm = conv0.clone(), ssm0.clone()
    for s in range(4):
        step = make_step(gen, s + 1)
        for k, v in step.items():
            if isinstance(v, torch.Tensor):
                static[k].copy_(v)
        core.fill_(7.0)
        z.fill_(7.0)
        graph.replay()
        torch.cuda.synchronize()

        ref_core = torch.full((ROWS, HV, V), 7.0)
        ref_z = ref_core.clone()
        call(ref_core, ref_z, cpu_conv, cpu_ssm, layer, step, nat_rows)
        assert bit_equal(conv_state.cpu(), cpu_conv), f"step {s}: conv_state"
        assert bit_equal(z.cpu(), ref_z), f"step {s}: z"
        assert rel_l2(core.cpu(), ref_core) <= 1e-5, f"step {s}: core_attn_out"
        assert rel_l2(ssm_state.cpu(), cpu_ssm) <= 1e-5, f"step {s}: ssm_state"
        assert torch.all(core[nat_rows:] == 7.0), "rows past num_actual_tokens must stay untouched"


def test_cuda_graph_functional_op():
    """A functional op (allocating its output) captured and replayed."""
    args = to_device(recurrent_args(), "cuda")
    ssm0 = args[7].clone()
    torch.ops.gdn.gated_delta_rule_recurrent(*args)  # warm-up
    args[7].copy_(ssm0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o = torch.ops.gdn.gated_delta_rule_recurrent(*args)
    args[0].mul_(0.5)  # new q in the same buffer
    graph.replay()
    torch.cuda.synchronize()
    eager_args = to_device(recurrent_args(), "cuda")
    eager_args[0].mul_(0.5)
    ref = torch.ops.gdn.gated_delta_rule_recurrent(*eager_args)
    assert bit_equal(o, ref) and bit_equal(args[7], eager_args[7])


def test_runs_on_current_stream():
    """The op is queued on the caller's (non-blocking) stream behind a slow write of its input: on
    any other stream it would read the old q (or be overwritten by its own zero fill)."""
    args = to_device(recurrent_args(), "cuda")
    new_q = args[0] * 0.5
    ref_args = to_device(recurrent_args(), "cuda")
    ref_args[0].copy_(new_q)
    ref = torch.ops.gdn.gated_delta_rule_recurrent(*ref_args)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)
        args[0].copy_(new_q)
        o = torch.ops.gdn.gated_delta_rule_recurrent(*args)
    stream.synchronize()
    assert bit_equal(o, ref) and bit_equal(args[7], ref_args[7])


def test_cuda_errors_name_the_device():
    args = recurrent_args()
    args = to_device(args, "cuda")
    args[7] = args[7].cpu()  # ssm_state on the host
    with pytest.raises(RuntimeError, match="ssm_state"):
        torch.ops.gdn.gated_delta_rule_recurrent(*args)
