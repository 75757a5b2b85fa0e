// gdn_attention's deferred-commit mode in a CUDA graph, driven through the CUDA runtime API as an
// engine drives it (device buffers allocated once, metadata in device buffers of fixed size, the
// caller's non-blocking stream); skipped without a GPU.
//   CudaDeferredGraph.ReplaysWithNewMetadata: a mixed batch (a prefill without initial state, a
//     decode replaying a logged path, a verify sequence whose tokens form a tree, a verify chain, a
//     padding sequence by the null block) captured once in global capture mode and replayed 3 times;
//     before each replay the host writes new projections, token order, replay counts, accepted paths
//     and tree parents into the same device buffers and resets the pools and logs. Each replay is
//     compared with the CPU backend on the same host inputs, with the tolerances and untouched-memory
//     checks of expect_match (tests/support/prop_deferred_attention.h): core_attn_out within
//     relative L2 1e-5 (float32 activations and state), conv pool, conv log and z bit for bit.
// With the planner's choice and each deferred kernel form forced.
#include "prop_deferred_attention.h"

#ifdef GDN_WITH_CUDA
#include "cuda_device.h"

namespace gdn::prop {
namespace {

class CudaDeferredGraph : public ::testing::TestWithParam<Backend> {};

constexpr int64_t kCols = 8, kSlots = 6, kNull = 4;  // slot 4: the null block; slot 5 never named
const std::vector<int64_t> kLens = {5, 1, 7, 3, 2};  // prefill, decode, tree, chain, padding (verify)

// Round `round`'s sequences (fixed lengths and kinds; new rows, counts, paths, parents) into p and
// the host buffers of the extra tensors (their sizes fixed).
void fill_round(AttnProblem& p, Rng& r, Buf& ns_replay, Buf& ns_path, Buf& sp_path, Buf& parents) {
  const std::vector<int64_t> perm = random_perm(p.num_actual, r);
  p.seqs.clear();
  int64_t next = 0, tok = 0;
  for (int64_t i = 0; i < 5; ++i) {
    AttnSeq s;
    for (int64_t t = 0; t < kLens[i]; ++t) s.rows.push_back(perm[next++]);
    s.spec = i >= 2;
    const int64_t slot = i == 4 ? kNull : i;
    if (s.spec) {
      s.cols.assign(kCols, slot);
      s.nacc = r.randint(0, kCols);
      for (int64_t j = 0; j < kCols; ++j) sp_path.seti((i - 2) * kCols + j, r.randint(-1, kCols - 1));
      for (int64_t t = 0; t < kLens[i]; ++t) parents.seti(tok++, i == 2 ? (t == 0 ? -1 : r.randint(-1, t - 1)) : t - 1);
    } else {
      s.slot = slot;
      s.has_init = i == 1;
      ns_replay.seti(i, r.randint(0, kCols));
      for (int64_t j = 0; j < kCols; ++j) ns_path.seti(i * kCols + j, j < 3 ? r.randint(0, kCols - 1) : j);
    }
    p.seqs.push_back(s);
  }
  build_meta(p);
  fill_normal(p.qkvz, r, 1.0);
  fill_normal(p.ba, r, 1.0);
}

TEST_P(CudaDeferredGraph, ReplaysWithNewMetadata) {
  const Backend be = GetParam();
  PROP_SKIP_IF_UNAVAILABLE(be);
  Rng r(9500);
  AttnProblem p;
  p.act = DType::kFloat32; p.ssm_dtype = DType::kFloat32; p.cols = kCols; p.reorder = true;
  p.H = 1; p.HV = 2; p.K = 128;  // the non-spec group (chains) in the lean form, the spec group (a tree) not
  p.conv_layout = SpecConvLayout::kPerToken; p.conv_rows_extra = 1;
  p.num_slots = kSlots; p.null_id = kNull;
  p.num_actual = 18;  // the tokens of kLens
  p.rows_alloc = p.num_actual + 4;
  alloc_params_and_pools(p, r);
  fill_normal(p.conv_pool, r, 1.0);
  fill_normal(p.ssm_pool, r, 0.3);
  p.qkvz = Buf(p.act, {p.rows_alloc, p.qkvz_width()});
  p.ba = Buf(p.act, {p.rows_alloc, 2 * p.HV});
  const Side init = make_side(p, kCols, r);
  Buf ns_replay(p.index_dtype, {2}), ns_path(p.index_dtype, {2, kCols}), sp_path(p.index_dtype, {3, kCols});
  Buf parents(p.index_dtype, {12});  // the spec tokens
  Side dev = init;  // the host twins of the graph's logs (its pools: p.conv_pool, p.ssm_pool)
  Out o;
  DeviceBufs d;
  Stream st;
  Graph g;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    fill_round(p, r, ns_replay, ns_path, sp_path, parents);
    p.conv_pool = init.conv;
    p.ssm_pool = init.ssm;
    dev = init;
    make_outputs(p, &o.core, &o.z, 0);
    const Out sentinel = o;
    ASSERT_EQ(cudaSuccess, upload_attention(d, p, o.core, o.z));
    for (Buf* b : {&dev.rec[0], &dev.rec[1], &dev.cvl[0], &dev.cvl[1], &ns_replay, &ns_path, &sp_path, &parents})
      ASSERT_EQ(cudaSuccess, d.upload(*b));
    ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
    if (round == 0) {  // the op's arguments: the device twins, shapes and plain ints as of round 0
      GdnAttentionArgs a = device_attention_args(d, p, o.core, o.z);
      a.verify_log = d.view(dev.rec[0]);
      a.verify_log_out = d.view(dev.rec[1]);
      a.conv_log = d.view(dev.cvl[0]);
      a.conv_log_out = d.view(dev.cvl[1]);
      a.non_spec_num_accepted_tokens = d.view(ns_replay);
      a.non_spec_accepted_path = d.view(ns_path);
      a.spec_accepted_path = d.view(sp_path);
      a.spec_token_parents = d.view(parents);
      capture(st.s, g, [&](cudaStream_t s) { return gdn::internal::gdn_attention(a, s, {be.path}); });
      if (HasFatalFailure()) return;
    }
    ASSERT_EQ(cudaSuccess, cudaGraphLaunch(g.exec, st.s));
    ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(st.s));
    ASSERT_EQ(cudaSuccess, cudaGetLastError());
    Side got = init;
    Out og = o;
    ASSERT_EQ(cudaSuccess, d.download(p.conv_pool, got.conv));
    ASSERT_EQ(cudaSuccess, d.download(p.ssm_pool, got.ssm));
    for (int k = 0; k < 2; ++k) {
      ASSERT_EQ(cudaSuccess, d.download(dev.rec[k], got.rec[k]));
      ASSERT_EQ(cudaSuccess, d.download(dev.cvl[k], got.cvl[k]));
    }
    ASSERT_EQ(cudaSuccess, d.download(o.core, og.core));
    ASSERT_EQ(cudaSuccess, d.download(o.z, og.z));
    Side cpu = init;
    Out oc;
    const Extra x{&ns_replay, &ns_path, &sp_path, &parents};
    PROP_ASSERT_OK(run_side(Backend::kCPU, p, cpu, 0, x, &oc));
    expect_match(p, got, init, cpu, og, oc, 0);
    EXPECT_EQ(bit_diff(og.core, p.num_actual * p.HV * p.V, sentinel.core, p.num_actual * p.HV * p.V,
                       (p.rows_alloc - p.num_actual) * p.HV * p.V), "")
        << "graph-padded rows of core_attn_out";
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaDeferredGraph, ::testing::ValuesIn(cuda_deferred_backends()),
                         [](const ::testing::TestParamInfo<Backend>& i) { return capture::backend_name(i.param); });

}  // namespace
}  // namespace gdn::prop

#endif  // GDN_WITH_CUDA
