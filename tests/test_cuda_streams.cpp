// CUDA streams and run-to-run determinism of the CUDA backend, through the CUDA runtime API.
//   CudaStreams.TwoStreamsAtOnce: two independent problems (own pools, different sizes, one with a
//     long prefill) launched on two streams back to back without synchronising in between; both
//     equal their CPU references.
//   CudaDeterminism.ByteIdenticalAcrossRuns: the same call from identical device inputs, 3 times:
//     core_attn_out, z, conv_state and ssm_state identical byte for byte (docs/contract.md §6).
//   CudaFusedLaunches.OneAndTwoLaunchesAgree: gdn_attention as one launch (the cluster step, plain
//     lanes: thread-block clusters of the blocks of one (sequence, key head), sm_90) and as two
//     (forced): both equal to the CPU and byte-identical (the same summation order); a captured
//     graph holds 1 kernel node where the cluster fits (<= 8 blocks, sm_90; 16 when the card
//     allows) and 2 when two launches are forced, for cluster sizes 4..16 and one too large for a
//     cluster (falls back to two launches).
//   CudaPdl.ChainedCallsSameWithAndWithoutOverlap: three gdn_attention calls chained on the same
//     pools (each reads the states and conv windows the previous one wrote), eager and as one
//     captured graph, with each step kernel path: byte-identical to the same calls with the host
//     waiting for each one (no kernel overlaps its predecessor), so programmatic dependent launch
//     never lets a kernel read before its predecessor is done.
// Tolerances as in test_cuda_graph.cpp (same float32 math, other summation order: 1e-5 for float32
// activations and state, 1e-2 when either is 16-bit; copies of input bits exact).
#include <string>

#include "cuda_device.h"
#include "forced_path.h"
#include "prop_attention.h"

#ifdef GDN_WITH_CUDA
namespace gdn::prop {
namespace {

// ---- test (b): two streams at once ----

AttnProblem stream_problem(int which, Rng& r) {
  AttnProblem p;
  MixOptions m;
  if (which == 0) {  // long prefills (up to 300 tokens), bf16 activations
    p.act = DType::kBFloat16; p.ssm_dtype = DType::kFloat32; p.K = 64; p.V = 64; p.cols = 3;
    m.max_prefill = 300;
  } else {           // many short sequences, float32, block layout, random row order
    p.act = DType::kFloat32; p.ssm_dtype = DType::kFloat32; p.K = 32; p.V = 64; p.cols = 4; p.reorder = true;
    m.n_spec = 6; m.n_decode = 5; m.permute_rows = true;
  }
  make_mixed_batch(p, r, m);
  fill_attention_data(p, r);
  return p;
}

TEST(CudaStreams, TwoStreamsAtOnce) {
  GRAPH_SKIP_WITHOUT_GPU();
  Rng r(9300);
  AttnProblem p[2] = {stream_problem(0, r), stream_problem(1, r)};
  Buf core[2], z[2];
  DeviceBufs d[2];
  Stream st[2];
  GdnAttentionArgs args[2];
  for (int i = 0; i < 2; ++i) {
    make_outputs(p[i], &core[i], &z[i], i);
    ASSERT_EQ(cudaSuccess, upload_attention(d[i], p[i], core[i], z[i]));
    ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&st[i].s, cudaStreamNonBlocking));
    args[i] = device_attention_args(d[i], p[i], core[i], z[i]);
  }
  // Back to back, no synchronisation in between: the second runs while the long prefills of the
  // first are still going.
  Status s0 = gdn::gdn_attention(args[0], st[0].s);
  Status s1 = gdn::gdn_attention(args[1], st[1].s);
  ASSERT_TRUE(s0.ok()) << s0.message();
  ASSERT_TRUE(s1.ok()) << s1.message();
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(st[0].s));
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(st[1].s));
  ASSERT_EQ(cudaSuccess, cudaGetLastError());
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(::testing::Message() << "stream " << i << ", " << describe(p[i]));
    AttnOut got, ref;
    ASSERT_EQ(cudaSuccess, download_attention(d[i], p[i], core[i], z[i], &got));
    PROP_ASSERT_OK(cpu_attention(p[i], core[i], z[i], &ref));
    expect_attention_match(p[i], got, ref, core[i], z[i], tol_of(p[i].act, p[i].ssm_dtype));
  }
}

// A random mixed batch (prefills up to max_prefill tokens, decodes, ragged verify with 4 columns,
// padding) with its rows in random order.
AttnProblem mixed_problem(uint64_t seed, DType act, DType ssm, int64_t H, int64_t HV, int64_t K, int64_t V,
                          int64_t max_prefill) {
  Rng r(seed);
  AttnProblem p;
  p.act = act; p.ssm_dtype = ssm; p.H = H; p.HV = HV; p.K = K; p.V = V; p.cols = 4;
  MixOptions m;
  m.max_prefill = max_prefill;
  m.permute_rows = true;
  make_mixed_batch(p, r, m);
  fill_attention_data(p, r);
  return p;
}

// ---- test (c): byte-identical results across runs ----

struct DetParam {
  DType act, ssm;
  int64_t K, V;
};
std::string param_str(const DetParam& p) {
  return std::string("act") + dtype_short(p.act) + "_ssm" + dtype_short(p.ssm) + "_K" + std::to_string(p.K) + "_V" +
         std::to_string(p.V);
}
void PrintTo(const DetParam& p, std::ostream* os) { *os << param_str(p); }

class CudaDeterminism : public ::testing::TestWithParam<DetParam> {};

TEST_P(CudaDeterminism, ByteIdenticalAcrossRuns) {
  GRAPH_SKIP_WITHOUT_GPU();
  const DetParam& prm = GetParam();
  AttnProblem p = mixed_problem(9400 + prm.K + prm.V, prm.act, prm.ssm, 2, 4, prm.K, prm.V, 64);
  SCOPED_TRACE(describe(p));
  Buf core, z;
  make_outputs(p, &core, &z, 0);
  DeviceBufs d;
  Stream st;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
  AttnOut runs[3];
  for (int run = 0; run < 3; ++run) {
    ASSERT_EQ(cudaSuccess, upload_attention(d, p, core, z));  // identical inputs, pools and sentinels
    PROP_ASSERT_OK(gdn::gdn_attention(device_attention_args(d, p, core, z), st.s));
    ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(st.s));
    ASSERT_EQ(cudaSuccess, cudaGetLastError());
    ASSERT_EQ(cudaSuccess, download_attention(d, p, core, z, &runs[run]));
  }
  AttnOut ref;  // the first run must also be right (identical garbage would pass the rest)
  PROP_ASSERT_OK(cpu_attention(p, core, z, &ref));
  expect_attention_match(p, runs[0], ref, core, z, tol_of(p.act, p.ssm_dtype));
  for (int run = 1; run < 3; ++run) {  // same_bytes: memcmp of the whole allocation
    SCOPED_TRACE(::testing::Message() << "run " << run << " vs run 0");
    const AttnOut& a = runs[run];
    const AttnOut& b = runs[0];
    EXPECT_TRUE(a.core.same_bytes(b.core)) << "core_attn_out: " << byte_diff(a.core, b.core);
    EXPECT_TRUE(a.z.same_bytes(b.z)) << "z: " << byte_diff(a.z, b.z);
    EXPECT_TRUE(a.conv.same_bytes(b.conv)) << "conv_state: " << byte_diff(a.conv, b.conv);
    EXPECT_TRUE(a.ssm.same_bytes(b.ssm)) << "ssm_state: " << byte_diff(a.ssm, b.ssm);
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaDeterminism,
                         ::testing::Values(DetParam{DType::kBFloat16, DType::kFloat32, 128, 128},
                                           DetParam{DType::kBFloat16, DType::kBFloat16, 64, 64},
                                           DetParam{DType::kFloat32, DType::kFloat32, 64, 32}),
                         [](const ::testing::TestParamInfo<DetParam>& i) { return param_str(i.param); });

// ---- test (d): one launch and two launches of the fused step agree ----

struct LaunchParam {
  DType act, ssm;
  int64_t H, HV, K, V;
  int nodes_one;  // kernel nodes expected by default on sm_90: 1, 2 (no cluster fits) or 0 (1 or 2:
                  // a non-portable cluster size, used when the card's GPCs can hold it)
};
std::string param_str(const LaunchParam& p) {
  return std::string("act") + dtype_short(p.act) + "_ssm" + dtype_short(p.ssm) + "_H" + std::to_string(p.H) + "_HV" +
         std::to_string(p.HV) + "_K" + std::to_string(p.K) + "_V" + std::to_string(p.V);
}
void PrintTo(const LaunchParam& p, std::ostream* os) { *os << param_str(p); }

class CudaFusedLaunches : public ::testing::TestWithParam<LaunchParam> {};
void one_and_two_launches_agree(const LaunchParam& prm, AttnProblem& p);

TEST_P(CudaFusedLaunches, OneAndTwoLaunchesAgree) {
  GRAPH_SKIP_WITHOUT_GPU();
  const LaunchParam& prm = GetParam();
  for (SpecConvLayout layout : {SpecConvLayout::kRolling, SpecConvLayout::kPerToken}) {
    AttnProblem p = mixed_problem(9500 + prm.HV * 7 + prm.V, prm.act, prm.ssm, prm.H, prm.HV, prm.K, prm.V, 40);
    p.conv_layout = layout;  // the pool has the rolling line's rows, more than per token needs
    SCOPED_TRACE(describe(p));
    one_and_two_launches_agree(prm, p);
    if (HasFailure()) return;
  }
}

void one_and_two_launches_agree(const LaunchParam& prm, AttnProblem& p) {
  Buf core, z;
  make_outputs(p, &core, &z, 0);
  int dev = 0, major = 0;
  ASSERT_EQ(cudaSuccess, cudaGetDevice(&dev));
  ASSERT_EQ(cudaSuccess, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  AttnOut out[2];
  for (int mode = 0; mode < 2; ++mode) {  // 0: the cluster step where it fits, 1: two launches
    SCOPED_TRACE(mode == 0 ? "cluster step" : "two launches");
    const cuda::plan::Override force{mode == 0 ? cuda::plan::Path::kStepCluster : cuda::plan::Path::kStepTwoLaunches};
    DeviceBufs d;
    Stream st;
    ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
    ASSERT_EQ(cudaSuccess, upload_attention(d, p, core, z));
    const GdnAttentionArgs args = device_attention_args(d, p, core, z);
    Graph g;
    capture(st.s, g, [&](cudaStream_t s) { return gdn::internal::gdn_attention(args, s, force); });
    size_t nodes = 0;
    ASSERT_EQ(cudaSuccess, cudaGraphGetNodes(g.graph, nullptr, &nodes));
    if (mode == 1 || major < 9 || prm.nodes_one != 0) {
      const size_t want = mode == 1 ? 2u : (major >= 9 ? static_cast<size_t>(prm.nodes_one) : 2u);
      EXPECT_EQ(nodes, want) << "kernel launches of one gdn_attention call";
    } else {
      EXPECT_TRUE(nodes == 1u || nodes == 2u) << nodes << " kernel launches of one gdn_attention call";
    }
    ASSERT_EQ(cudaSuccess, cudaGraphLaunch(g.exec, st.s));
    ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(st.s));
    ASSERT_EQ(cudaSuccess, cudaGetLastError());
    ASSERT_EQ(cudaSuccess, download_attention(d, p, core, z, &out[mode]));
  }
  AttnOut ref;
  PROP_ASSERT_OK(cpu_attention(p, core, z, &ref));
  expect_attention_match(p, out[0], ref, core, z, tol_of(p.act, p.ssm_dtype));
  expect_attention_match(p, out[1], ref, core, z, tol_of(p.act, p.ssm_dtype));
  EXPECT_TRUE(out[0].z.same_bytes(out[1].z)) << "z: " << byte_diff(out[0].z, out[1].z);
  EXPECT_TRUE(out[0].conv.same_bytes(out[1].conv)) << "conv_state: " << byte_diff(out[0].conv, out[1].conv);
  // The cluster kernel in its plain lane layout and the two-launch form sum in the same order.
  EXPECT_TRUE(out[0].core.same_bytes(out[1].core)) << "core_attn_out: " << byte_diff(out[0].core, out[1].core);
  EXPECT_TRUE(out[0].ssm.same_bytes(out[1].ssm)) << "ssm_state: " << byte_diff(out[0].ssm, out[1].ssm);
}

// Cluster = (ceil(V / rows per block), HV / H) blocks; 32 rows per block of the one-launch step at
// the default tuning (StepTraits: 4 warps x 2 lane groups x 4 rows, or 1 x 8 in the lean layout).
INSTANTIATE_TEST_SUITE_P(
    Cuda, CudaFusedLaunches,
    ::testing::Values(LaunchParam{DType::kBFloat16, DType::kFloat32, 2, 4, 128, 128, 1},   // cluster 4 x 2
                      LaunchParam{DType::kBFloat16, DType::kBFloat16, 1, 3, 64, 64, 1},    // 2 x 3
                      LaunchParam{DType::kFloat32, DType::kFloat32, 1, 4, 32, 100, 0},     // 4 x 4 (non-portable)
                      LaunchParam{DType::kFloat16, DType::kFloat16, 1, 8, 32, 200, 2}),    // 7 x 8: too large
    [](const ::testing::TestParamInfo<LaunchParam>& i) { return param_str(i.param); });

// ---- test (e): programmatic dependent launch keeps stream order ----

TEST(CudaPdl, ChainedCallsSameWithAndWithoutOverlap) {
  GRAPH_SKIP_WITHOUT_GPU();
  AttnProblem p = mixed_problem(9600, DType::kBFloat16, DType::kFloat32, 2, 4, 128, 128, 24);
  SCOPED_TRACE(describe(p));
  Buf core, z;
  make_outputs(p, &core, &z, 0);
  using cuda::plan::Path;
  for (Path path : {Path::kAuto, Path::kStepCluster, Path::kStepClusterLean, Path::kStepPipelined,
                    Path::kStepPipelinedPrologue, Path::kStepTwoLaunches}) {
    SCOPED_TRACE(cuda::plan::path_name(path));
    AttnOut out[3], once;  // [host waits after each call (eager), eager, graph]; once: a single call
    for (int mode = 0; mode < 4; ++mode) {  // 3: the single call
      DeviceBufs d;
      Stream st;
      ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
      ASSERT_EQ(cudaSuccess, upload_attention(d, p, core, z));
      const GdnAttentionArgs args = device_attention_args(d, p, core, z);
      auto chain = [&](cudaStream_t s) {
        for (int c = 0; c < (mode == 3 ? 1 : 3); ++c) {
          Status e = gdn::internal::gdn_attention(args, s, {path});
          if (!e.ok()) return e;
          if (mode == 0 && cudaStreamSynchronize(s) != cudaSuccess) return Status::Error("cudaStreamSynchronize");
        }
        return Status::Ok();
      };
      if (mode == 2) {
        Graph g;
        capture(st.s, g, chain);
        ASSERT_EQ(cudaSuccess, cudaGraphLaunch(g.exec, st.s));
      } else {
        PROP_ASSERT_OK(chain(st.s));
      }
      ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(st.s));
      ASSERT_EQ(cudaSuccess, cudaGetLastError());
      ASSERT_EQ(cudaSuccess, download_attention(d, p, core, z, mode == 3 ? &once : &out[mode]));
    }
    const AttnOut& ref = out[0];  // every call after the previous one finished
    for (int k = 1; k < 3; ++k) {
      SCOPED_TRACE(k == 1 ? "eager" : "graph");
      const AttnOut& a = out[k];
      EXPECT_TRUE(a.core.same_bytes(ref.core)) << "core_attn_out: " << byte_diff(a.core, ref.core);
      EXPECT_TRUE(a.z.same_bytes(ref.z)) << "z: " << byte_diff(a.z, ref.z);
      EXPECT_TRUE(a.conv.same_bytes(ref.conv)) << "conv_state: " << byte_diff(a.conv, ref.conv);
      EXPECT_TRUE(a.ssm.same_bytes(ref.ssm)) << "ssm_state: " << byte_diff(a.ssm, ref.ssm);
    }
    // Each call of the chain read what the previous one wrote: three steps differ from one.
    EXPECT_FALSE(ref.ssm.same_bytes(once.ssm)) << "three chained steps left the ssm pool as one step does";
    EXPECT_FALSE(ref.conv.same_bytes(once.conv)) << "three chained steps left the conv pool as one step does";
  }
}

}  // namespace
}  // namespace gdn::prop
#else  // !GDN_WITH_CUDA
#include <gtest/gtest.h>
TEST(CudaStreams, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
