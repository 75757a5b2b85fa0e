// tests/support/cuda_device.h — device twins of the property tests' host buffers and the CPU
// reference of a gdn_attention problem, for the CUDA tests that drive the runtime API directly
// (test_cuda_graph.cpp, test_cuda_streams.cpp). CUDA builds only.
#pragma once
#ifdef GDN_WITH_CUDA
#include <cuda_runtime.h>

#include <map>

#include "forced_path.h"
#include "prop_attention.h"

namespace gdn::prop {
namespace {  // internal to each test file that includes it

#define GRAPH_SKIP_WITHOUT_GPU()                                                        \
  do {                                                                                  \
    if (!::gdn::cuda_backend_available()) GTEST_SKIP() << "no CUDA device available"; \
  } while (0)

// ---- device twins of host buffers ----

// One device allocation per host Buf (keyed by the Buf object, whose shape must stay fixed), the
// same bytes including dim-0 stride gaps.
class DeviceBufs {
 public:
  DeviceBufs() = default;
  DeviceBufs(const DeviceBufs&) = delete;
  DeviceBufs& operator=(const DeviceBufs&) = delete;
  ~DeviceBufs() {
    for (auto& e : mem_) cudaFree(e.second.ptr);
  }

  cudaError_t upload(const Buf& b) {
    const size_t n = bytes(b);
    auto it = mem_.find(&b);
    if (it == mem_.end()) {
      if (mem_.empty()) {
        cudaError_t e = cudaGetDevice(&device_);
        if (e != cudaSuccess) return e;
      }
      void* p = nullptr;
      cudaError_t e = cudaMalloc(&p, std::max<size_t>(n, 16));
      if (e != cudaSuccess) return e;
      it = mem_.emplace(&b, Entry{p, n}).first;
    }
    if (it->second.bytes != n) return cudaErrorInvalidValue;  // a fixed-capacity buffer changed size
    return cudaMemcpy(it->second.ptr, b.data(), n, cudaMemcpyHostToDevice);
  }
  // Copies the device twin of `key` into `into` (a buffer of the same shape).
  cudaError_t download(const Buf& key, Buf& into) const {
    const Entry& e = mem_.at(&key);
    if (bytes(into) != e.bytes) return cudaErrorInvalidValue;
    return cudaMemcpy(into.data(), e.ptr, e.bytes, cudaMemcpyDeviceToHost);
  }
  // A device twin's size: the host buffer's bytes including dim-0 stride gaps.
  static size_t bytes(const Buf& b) { return static_cast<size_t>(b.phys_elems()) * b.esize(); }
  TensorView view(Buf& b) const {
    TensorView v = b.view();
    v.data = mem_.at(&b).ptr;
    v.device = Device::kCUDA;
    v.device_index = device_;
    return v;
  }

 private:
  struct Entry {
    void* ptr;
    size_t bytes;
  };
  std::map<const Buf*, Entry> mem_;
  int device_ = 0;
};

struct Stream {
  cudaStream_t s = nullptr;
  ~Stream() { if (s) cudaStreamDestroy(s); }
};
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() { if (exec) cudaGraphExecDestroy(exec); if (graph) cudaGraphDestroy(graph); }
};

// Captures launch(stream) on s (global capture mode: the op may make no unsafe call) and
// instantiates the graph.
template <typename F>
void capture(cudaStream_t s, Graph& g, F launch) {
  ASSERT_EQ(cudaSuccess, cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  Status st = launch(s);
  cudaError_t end = cudaStreamEndCapture(s, &g.graph);  // always end the capture
  ASSERT_TRUE(st.ok()) << "op failed during capture: " << st.message();
  ASSERT_EQ(cudaSuccess, end);
  size_t nodes = 0;
  ASSERT_EQ(cudaSuccess, cudaGraphGetNodes(g.graph, nullptr, &nodes));
  EXPECT_GE(nodes, 1u) << "the op launched nothing into the capture";
  ASSERT_EQ(cudaSuccess, cudaGraphInstantiateWithFlags(&g.exec, g.graph, 0));
}

double tol_of(DType act, DType ssm) { return act == DType::kFloat32 && ssm == DType::kFloat32 ? 1e-5 : 1e-2; }

// Every state slot within tol (relative L2 per slot), the stride gaps between slots untouched.
void expect_pool_close(const Buf& got, const Buf& ref, double tol, const char* what) {
  for (int64_t s = 0; s < got.rows(); ++s) expect_slot_close(got, s, ref, s, tol, what);
  for (int64_t q = 0; q < got.phys_elems(); ++q)
    if (!got.is_logical(q) && got.bits_phys(q) != ref.bits_phys(q)) {
      ADD_FAILURE() << what << ": stride gap element " << q << " was written";
      break;
    }
}

template <typename T>
void shuffle(std::vector<T>& v, Rng& r) {
  for (int64_t i = static_cast<int64_t>(v.size()) - 1; i > 0; --i) std::swap(v[i], v[r.randint(0, i)]);
}

// ---- gdn_attention on the device ----

GdnAttentionArgs device_attention_args(const DeviceBufs& d, AttnProblem& p, Buf& core, Buf& z) {
  GdnAttentionArgs a = attention_args(p, core, z);  // ints, shapes and which tensors are present
  auto on = [&](TensorView& v, Buf& b) { if (v.present()) v = d.view(b); };
  on(a.core_attn_out, core); on(a.z, z); on(a.projected_states_qkvz, p.qkvz); on(a.projected_states_ba, p.ba);
  on(a.conv_state, p.conv_pool); on(a.ssm_state, p.ssm_pool); on(a.conv_weights, p.weight); on(a.conv_bias, p.bias);
  on(a.A_log, p.A_log); on(a.dt_bias, p.dt_bias); on(a.has_initial_state, p.has_init);
  on(a.non_spec_query_start_loc, p.ns_qsl); on(a.non_spec_token_indx, p.ns_indx);
  on(a.non_spec_state_indices_tensor, p.ns_slots); on(a.spec_query_start_loc, p.sp_qsl);
  on(a.spec_token_indx, p.sp_indx); on(a.spec_state_indices_tensor, p.sp_slots); on(a.num_accepted_tokens, p.nacc);
  return a;
}

// Uploads every tensor of p and the (sentinel-filled) outputs, then waits for the copies.
cudaError_t upload_attention(DeviceBufs& d, AttnProblem& p, Buf& core, Buf& z) {
  for (Buf* b : {&core, &z, &p.qkvz, &p.ba, &p.weight, &p.bias, &p.A_log, &p.dt_bias, &p.conv_pool, &p.ssm_pool,
                 &p.ns_qsl, &p.ns_indx, &p.ns_slots, &p.has_init, &p.sp_qsl, &p.sp_indx, &p.sp_slots, &p.nacc}) {
    cudaError_t e = d.upload(*b);
    if (e != cudaSuccess) return e;
  }
  return cudaDeviceSynchronize();
}

struct AttnOut {
  Buf core, z, conv, ssm;
};

cudaError_t download_attention(const DeviceBufs& d, const AttnProblem& p, const Buf& core, const Buf& z,
                               AttnOut* o) {
  o->core = core; o->z = z; o->conv = p.conv_pool; o->ssm = p.ssm_pool;  // shapes; bytes from the device
  cudaError_t e = d.download(core, o->core);
  if (e == cudaSuccess) e = d.download(z, o->z);
  if (e == cudaSuccess) e = d.download(p.conv_pool, o->conv);
  if (e == cudaSuccess) e = d.download(p.ssm_pool, o->ssm);
  return e;
}

// The reference: the CPU backend on copies of the same host inputs.
Status cpu_attention(const AttnProblem& p, const Buf& core, const Buf& z, AttnOut* o) {
  AttnProblem c = p;
  o->core = core; o->z = z;
  Status s = gdn::gdn_attention(attention_args(c, o->core, o->z));
  o->conv = c.conv_pool;
  o->ssm = c.ssm_pool;
  return s;
}

// gdn_attention on p on the device (fresh device twins, its own non-blocking stream), with every
// output and both pools downloaded.
// path: the kernel path forced (kAuto: the planner's choice).
AttnOut run_device_attention(AttnProblem& p, Buf& core, Buf& z, cuda::plan::Path path = cuda::plan::Path::kAuto) {
  AttnOut out;
  DeviceBufs d;
  Stream st;
  EXPECT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
  EXPECT_EQ(cudaSuccess, upload_attention(d, p, core, z));
  const Status s = gdn::internal::gdn_attention(device_attention_args(d, p, core, z), st.s, {path});
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(st.s));
  EXPECT_EQ(cudaSuccess, cudaGetLastError());
  EXPECT_EQ(cudaSuccess, download_attention(d, p, core, z, &out));
  return out;
}

// core/ssm within tol, z and conv bit-exact, rows >= num_actual_tokens still hold the sentinel.
void expect_attention_match(const AttnProblem& p, const AttnOut& got, const AttnOut& ref, const Buf& sent_core,
                            const Buf& sent_z, double tol) {
  const int64_t row = p.HV * p.V, n = p.num_actual * row, pad = (p.rows_alloc - p.num_actual) * row;
  const double e = rel_l2(got.core, ref.core, {{0, n}}, {{0, n}});
  EXPECT_LE(e, tol) << "core_attn_out rows < num_actual_tokens: relative L2 error vs the CPU";
  EXPECT_EQ(bit_diff(got.core, n, sent_core, n, pad), "") << "core_attn_out rows >= num_actual_tokens were written";
  EXPECT_EQ(byte_diff(got.z, ref.z), "") << "z differs from the CPU";
  EXPECT_EQ(bit_diff(got.z, n, sent_z, n, pad), "") << "z rows >= num_actual_tokens were written";
  EXPECT_EQ(byte_diff(got.conv, ref.conv), "") << "conv_state pool differs from the CPU";
  expect_pool_close(got.ssm, ref.ssm, tol, "ssm_state vs the CPU");
}

}  // namespace
}  // namespace gdn::prop
#endif  // GDN_WITH_CUDA
