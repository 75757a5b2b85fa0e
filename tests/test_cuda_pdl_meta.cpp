// Metadata written by the kernel right before the op, which lets the op start early (programmatic
// dependent launch): the op's kernels must read the step's metadata after their dependency wait
// (griddepcontrol.wait), as they do unless the caller opts in to reading it before
// (metadata_ready_early, include/gdn/ops.h, which requires that the kernel before the op does not
// write it). These tests make that case happen without the opt-in, then run the op again with the
// opt-in where it holds (the metadata final, the kernel before the op a copy of other buffers).
//   CudaPdlMeta.MetadataWrittenByThePreviousKernel: on one stream, a one-block kernel
//     (tests/support/pdl_writer.cu) calls griddepcontrol.launch_dependents at once, spins about
//     1 ms, then overwrites query_start_loc, state_indices and num_accepted_tokens with new
//     values; gated_delta_rule_recurrent is launched right after it on device buffers. Its blocks
//     become resident while the writer spins, so a read of the metadata before the wait sees the
//     old values (other slots of the same pool, other token ranges, other accepted counts; every
//     slot holds a different random state). Outputs and every state slot must equal the CPU
//     backend run with the new metadata. Decode and verify (3 columns, ragged) batches at N = 2 and
//     N = 8, float32 and bf16 state, Qwen3-Next TP1 heads, with the planner's choice and every
//     kernel path forced.
// Tolerances as in test_cuda_shapes.cpp: bf16 outputs rel L2 1e-2; states 1e-5 (float32) or 1e-2.
#include <optional>

#include "cuda_device.h"
#include "forced_path.h"
#include "prop_ops.h"

#ifdef GDN_WITH_CUDA
#include "pdl_writer.h"

namespace gdn::prop {
namespace {

struct MetaParam {
  DType state;
  int64_t n;
  bool verify;
  Backend be;  // CUDA, the planner's choice or a forced kernel path
};
std::string meta_name(const ::testing::TestParamInfo<MetaParam>& i) {
  return std::string("state") + dtype_short(i.param.state) + "_N" + std::to_string(i.param.n) +
         (i.param.verify ? "_verify" : "_decode") + "_" + capture::backend_name(i.param.be);
}
class CudaPdlMeta : public ::testing::TestWithParam<MetaParam> {};

TEST_P(CudaPdlMeta, MetadataWrittenByThePreviousKernel) {
  GRAPH_SKIP_WITHOUT_GPU();
  const MetaParam& prm = GetParam();
  const int64_t n = prm.n, H = 16, HV = 32, K = 128, V = 128, cols = prm.verify ? 3 : 1;
  Rng r(9900 + n * 5 + (prm.verify ? 1 : 0) + (prm.state == DType::kFloat32 ? 2 : 0));
  // new metadata (what the op must use) and old (what the buffers hold when the op is launched):
  // the same tokens in total, other ranges, other slots of the pool, other accepted counts
  std::vector<int64_t> lens(n, 1), acc_new(n), acc_old(n);
  for (int64_t i = 0; i < n; ++i) {
    if (prm.verify) lens[i] = r.randint(1, cols);
    acc_new[i] = r.randint(1, cols);
    acc_old[i] = 1 + acc_new[i] % cols;
  }
  std::vector<int64_t> lens_old(lens.rbegin(), lens.rend());
  if (prm.verify) std::rotate(lens_old.begin(), lens_old.begin() + 1, lens_old.end());
  const int64_t slots_n = 2 * n * cols;
  const std::vector<int64_t> perm_new = random_perm(slots_n, r), perm_old = random_perm(slots_n, r);
  auto slot_rows = [&](const std::vector<int64_t>& perm) {
    std::vector<std::vector<int64_t>> rows(n, std::vector<int64_t>(cols));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < cols; ++c) rows[i][c] = perm[i * cols + c];
    return rows;
  };
  auto slot_list = [&](const std::vector<int64_t>& perm) { return std::vector<int64_t>(perm.begin(), perm.begin() + n); };
  Buf qsl_new = index_buf(prefix_sum(lens)), qsl = index_buf(prefix_sum(lens_old));
  Buf slots_new = prm.verify ? index_buf2(slot_rows(perm_new), cols) : index_buf(slot_list(perm_new));
  Buf slots = prm.verify ? index_buf2(slot_rows(perm_old), cols) : index_buf(slot_list(perm_old));
  Buf nacc_new = index_buf(acc_new), nacc = index_buf(acc_old);
  const int64_t T = prefix_sum(lens).back();
  GdrIn in = make_gdr_in(r, T, H, HV, K, V, DType::kBFloat16, DType::kFloat32);
  Buf pool = make_ssm_pool(prm.state, slots_n + 1, HV, K, V, StateLayout::kVK);
  fill_normal(pool, r, 0.3);
  Buf pool_cpu = pool, o_cpu(DType::kBFloat16, {T, HV, V}), o = o_cpu;
  PROP_ASSERT_OK(run_gdr(Backend::kCPU, false, in, pool_cpu, StateLayout::kVK, qsl_new, slots_new,
                         prm.verify ? &nacc_new : nullptr, nullptr, o_cpu));

  DeviceBufs d;
  for (Buf* b : {&in.q, &in.k, &in.v, &in.a, &in.b, &in.A_log, &in.dt_bias, &pool, &o, &qsl, &slots, &nacc, &qsl_new,
                 &slots_new, &nacc_new})
    ASSERT_EQ(cudaSuccess, d.upload(*b));
  ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
  GatedDeltaRuleArgs a = gdr_args(in, pool, StateLayout::kVK, qsl, slots, prm.verify ? &nacc : nullptr, nullptr, o);
  a.q = d.view(in.q); a.k = d.view(in.k); a.v = d.view(in.v); a.a = d.view(in.a); a.b = d.view(in.b);
  a.A_log = d.view(in.A_log); a.dt_bias = d.view(in.dt_bias); a.ssm_state = d.view(pool); a.o = d.view(o);
  a.query_start_loc = d.view(qsl); a.state_indices = d.view(slots);
  if (prm.verify) a.num_accepted_tokens = d.view(nacc);
  auto job = [&](Buf& dst, Buf& src) { return CopyJob{d.view(dst).data, d.view(src).data, DeviceBufs::bytes(dst)}; };
  Stream st;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
  const cuda::plan::Override force{prm.be.path};
  // A first call loads the op's kernels (lazy module loading would hold back the early start of
  // the first launch of each); then the pool and o as before it.
  PROP_ASSERT_OK(gdn::internal::gated_delta_rule_recurrent(a, st.s, force));
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(st.s));
  auto expect_cpu = [&](const char* what) {
    ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(st.s));
    ASSERT_EQ(cudaSuccess, cudaGetLastError());
    Buf o_got = o, pool_got = pool;
    ASSERT_EQ(cudaSuccess, d.download(o, o_got));
    ASSERT_EQ(cudaSuccess, d.download(pool, pool_got));
    SCOPED_TRACE(what);
    const int64_t no = o_cpu.numel();
    EXPECT_LE(rel_l2(o_got, o_cpu, {{0, no}}, {{0, no}}), 1e-2) << "o: relative L2 error vs the CPU (new metadata)";
    const double stol = prm.state == DType::kFloat32 ? 1e-5 : 1e-2;
    for (int64_t s = 0; s < pool.rows(); ++s) expect_slot_close(pool_got, s, pool_cpu, s, stol, "ssm_state vs the CPU");
  };
  ASSERT_EQ(cudaSuccess, d.upload(pool));
  ASSERT_EQ(cudaSuccess, d.upload(o));
  ASSERT_EQ(cudaSuccess, launch_delayed_copy(job(qsl, qsl_new), job(slots, slots_new),
                                             prm.verify ? job(nacc, nacc_new) : CopyJob{}, 2000000, st.s));
  PROP_ASSERT_OK(gdn::internal::gated_delta_rule_recurrent(a, st.s, force));
  expect_cpu("metadata written by the previous kernel, read after the wait");
  // The opt-in where it holds: the metadata (now the new values) final, the kernel before the op a
  // delayed copy of two buffers the op does not read.
  ASSERT_EQ(cudaSuccess, d.upload(pool));
  ASSERT_EQ(cudaSuccess, d.upload(o));
  a.metadata_ready_early = true;
  ASSERT_EQ(cudaSuccess, launch_delayed_copy(job(qsl_new, qsl), CopyJob{}, CopyJob{}, 2000000, st.s));
  PROP_ASSERT_OK(gdn::internal::gated_delta_rule_recurrent(a, st.s, force));
  expect_cpu("metadata_ready_early");
}

std::vector<MetaParam> meta_params() {
  std::vector<MetaParam> v;
  for (DType st : {DType::kFloat32, DType::kBFloat16})
    for (int64_t n : {2, 8})
      for (bool verify : {false, true})
        for (Backend b : capture::test_backends(capture::Ops::kRecurrent))
          if (b.cuda()) v.push_back({st, n, verify, b});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudaPdlMeta, ::testing::ValuesIn(meta_params()), meta_name);

}  // namespace
}  // namespace gdn::prop
#endif  // GDN_WITH_CUDA
