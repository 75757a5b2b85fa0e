// Golden cases (tests/data/golden, see its README) on every backend, and the safetensors reader.
//
// Tolerance principle (golden README): relative L2 error over the written elements against the
// float64 reference: outputs and f32 states 1e-5 with f32 activations, 1e-2 with bf16/fp16
// activations or bf16/fp16 state storage; conv state and z bit-exact; every element the rules
// leave untouched bit-identical (outputs keep the caller's fill, pools their input). NaN fails.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "capture/case.h"
#include "capture/check.h"
#include "capture/safetensors.h"

namespace gdn::capture {
namespace {

std::vector<std::string> golden_files() { return list_case_files(GDN_GOLDEN_DIR); }

std::string describe(const CaseResult& r) {
  std::string s = r.name + " (" + r.op + ", " + backend_name(r.backend) + ")";
  if (!r.status.ok()) s += "\n  status: " + r.status.message();
  for (const OutputCheck& o : r.outputs) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "\n  %-14s %s rel_err %.3e tol %.1e, %lld compared, %lld not "
                  "bit-identical, %lld untouched changed",
                  o.name.c_str(), o.pass ? "ok  " : "FAIL", o.rel_err, o.tol,
                  static_cast<long long>(o.compared), static_cast<long long>(o.inexact),
                  static_cast<long long>(o.untouched_changed));
    s += buf;
    if (!o.detail.empty()) s += "\n    " + o.detail;
  }
  return s;
}

using GoldenParam = std::tuple<std::string, Backend>;

class GoldenTest : public ::testing::TestWithParam<GoldenParam> {
 protected:
  void Run(const RunOptions& options) {
    const auto& [path, backend] = GetParam();
    if (!backend_available(backend)) GTEST_SKIP() << backend_name(backend) << " backend not available";
    GoldenCase c;
    Status s = load_case(path, &c);
    ASSERT_TRUE(s.ok()) << s.message();
    SCOPED_TRACE(c.name + " params " + c.file.params.dump());
    CaseResult r = run_case(c, backend, options);
    ASSERT_TRUE(r.status.ok()) << describe(r);
    EXPECT_FALSE(r.outputs.empty());
    for (const OutputCheck& o : r.outputs) EXPECT_TRUE(o.has_reference) << o.name;
    EXPECT_TRUE(r.pass) << describe(r);
  }
};

// Dense pools, outputs poisoned with NaN.
TEST_P(GoldenTest, Dense) { Run(RunOptions{}); }

// Pools with a dim-0 stride larger than a slot (padding must survive), outputs filled with a
// finite sentinel so that a kernel writing NaN into untouched rows is caught too.
TEST_P(GoldenTest, StridedPoolsSentinelFill) {
  RunOptions o;
  o.fill = -768.0;  // exact in f32, bf16 and fp16
  o.pool_slot_pad = 3;
  Run(o);
}

std::string param_name(const ::testing::TestParamInfo<GoldenParam>& info) {
  std::string stem = std::get<0>(info.param);
  stem = stem.substr(stem.find_last_of('/') + 1);
  stem = stem.substr(0, stem.rfind('.'));
  for (char& ch : stem)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return stem + "_" + backend_name(std::get<1>(info.param));
}

// Each case on the CPU and on CUDA with every kernel path of its op (by the file name's prefix).
std::vector<GoldenParam> golden_params() {
  std::vector<GoldenParam> v;
  for (const std::string& f : golden_files()) {
    const std::string stem = f.substr(f.find_last_of('/') + 1);
    const capture::Ops ops = stem.rfind("attention", 0) == 0                                    ? capture::Ops::kAttention
                             : stem.rfind("chunk", 0) == 0 ? capture::Ops::kChunked : stem.rfind("recurrent", 0) == 0 ? capture::Ops::kRecurrent
                                                                                              : capture::Ops::kConv;
    for (Backend b : capture::test_backends(ops)) v.emplace_back(f, b);
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenTest, ::testing::ValuesIn(golden_params()), param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenTest);

TEST(GoldenData, DirectoryHasCases) {
  EXPECT_GE(golden_files().size(), 16u) << "golden cases missing in " << GDN_GOLDEN_DIR;
}

// The checker itself: a perturbed reference must make a passing case fail.
TEST(GoldenChecker, DetectsPerturbedReferences) {
  GoldenCase c;
  ASSERT_TRUE(load_case(std::string(GDN_GOLDEN_DIR) + "/conv_update_spec_rolling.safetensors", &c).ok());
  CaseResult base = run_case(c, Backend::kCPU);
  if (!base.status.ok() || !base.pass) GTEST_SKIP() << "base case fails: " << describe(base);

  GoldenCase bad_y = c;  // the f64 reference scaled by 1.01: rel err ~ 1e-3 > 1e-5
  auto* y = bad_y.file.find("out.y_f64");
  ASSERT_NE(y, nullptr);
  for (size_t i = 0; i < y->bytes.size(); i += 8) {
    double w;
    std::memcpy(&w, y->bytes.data() + i, 8);
    w *= 1.01;
    std::memcpy(y->bytes.data() + i, &w, 8);
  }
  EXPECT_FALSE(run_case(bad_y, Backend::kCPU).pass);

  GoldenCase bad_conv = c;  // one bit of the expected conv state flipped: not bit-exact
  bad_conv.file.find("out.conv_state")->bytes[0] ^= 1;
  CaseResult r = run_case(bad_conv, Backend::kCPU);
  EXPECT_FALSE(r.pass);

  GoldenCase extra = c;  // an input the op does not take is an error, not silently ignored
  extra.file.tensors["in.bogus"] = make_host_tensor(DType::kFloat32, {2});
  EXPECT_FALSE(run_case(extra, Backend::kCPU).status.ok());
}

// ---- write sets and comparisons (tools/capture/check.h) ----

TEST(GoldenChecker, WriteSetsFollowTheRules) {
  check::SequenceGroup g;  // verify batch, cols = 3, 6 slots, null block 5
  g.n = 5;
  g.qsl = {0, 3, 5, 4, 6, 10};  // seq 2 is empty (decreasing pair); seq 4 has 4 tokens > cols
  g.cols = 3;
  g.slots = {0, 1, 2,  -1, 3, 4,  1, 1, 1,  3, 9, 4,  4, 5, 2};
  g.accepted = {2, 1, 1, 3, 7};  // seq 3 reads column 2 (slot 4); seq 4: a clamps to 3 -> slot 2
  g.limit = 10;
  check::WriteSet w;
  w.rows.assign(10, 0);
  w.slots.assign(6, 0);
  check::mark_writes(g, 10, 6, int64_t{5}, &w);
  // seq 0: slots 0,1,2; seq 1: padding (column 0 invalid); seq 3 (tokens 4,5): columns 0,1 ->
  // slot 3 and slot 9 (invalid, skipped); seq 4: columns 0..2 -> 4, 5 (null block, skipped), 2.
  EXPECT_EQ(w.slots, (std::vector<char>{1, 1, 1, 1, 1, 0}));
  EXPECT_EQ(w.rows, (std::vector<char>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));

  check::SequenceGroup r;  // remapped tokens: one lands outside [0, row_bound) -> padding
  r.n = 2;
  r.qsl = {0, 2, 4};
  r.slots = {0, 1};
  r.has_remap = true;
  r.remap = {3, 0, 1, 7};
  r.limit = 4;
  check::WriteSet w2;
  w2.rows.assign(5, 0);
  w2.slots.assign(2, 0);
  check::mark_writes(r, 5, 2, std::nullopt, &w2);
  EXPECT_EQ(w2.rows, (std::vector<char>{1, 1, 0, 1, 0}));
  EXPECT_EQ(w2.slots, (std::vector<char>{1, 0}));
}

TEST(GoldenChecker, UntouchedRowsAndSlots) {
  HostTensor out = make_host_tensor(DType::kFloat32, {3, 2});
  std::vector<uint8_t> fill(4);
  check::store_real(-768.0, DType::kFloat32, fill.data());
  for (int i = 0; i < 6; ++i) check::store_real(i < 4 ? 1.0 + i : -768.0, DType::kFloat32, out.bytes.data() + 4 * i);
  HostTensor ref = make_host_tensor(DType::kFloat64, {2, 2});
  for (int i = 0; i < 4; ++i) check::store_real(1.0 + i, DType::kFloat64, ref.bytes.data() + 8 * i);
  const std::vector<char> rows = {1, 1, 0};
  EXPECT_TRUE(check::check_output("y", out, nullptr, &ref, rows, fill, 1e-5, false).pass);
  check::store_real(0.0, DType::kFloat32, out.bytes.data() + 4 * 5);  // an untouched row written
  OutputCheck c = check::check_output("y", out, nullptr, &ref, rows, fill, 1e-5, false);
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.untouched_changed, 1);

  HostTensor in = make_host_tensor(DType::kFloat32, {2, 2});
  HostTensor res = in, exp = in;
  const std::vector<char> slots = {1, 0};
  EXPECT_TRUE(check::check_pool("ssm_state", res, in, &exp, nullptr, &slots, 1e-5).pass);
  exp.bytes[12] ^= 1;  // the reference changes slot 1, which the rules leave untouched
  EXPECT_FALSE(check::check_pool("ssm_state", res, in, &exp, nullptr, &slots, 1e-5).pass);
  exp = in;
  res.bytes[12] ^= 1;  // the result changes slot 1
  EXPECT_FALSE(check::check_pool("ssm_state", res, in, &exp, nullptr, &slots, 1e-5).pass);
}

TEST(GoldenChecker, ElementConversions) {
  const DType types[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat64};
  for (DType t : types) {
    uint8_t b[8];
    for (double v : {-768.0, 0.0, 1.0, 0.5, -2.25, 0.15625, 49152.0}) {
      check::store_real(v, t, b);
      EXPECT_EQ(check::load_real(b, t), v) << dtype_name(t);
    }
    check::store_real(std::nan(""), t, b);
    EXPECT_TRUE(std::isnan(check::load_real(b, t))) << dtype_name(t);
  }
  uint8_t h[2];
  check::store_real(1.0 / 3.0, DType::kFloat16, h);
  EXPECT_NEAR(check::load_real(h, DType::kFloat16), 1.0 / 3.0, 1.0 / 2048);
  check::store_real(1e-6, DType::kFloat16, h);  // subnormal
  EXPECT_NEAR(check::load_real(h, DType::kFloat16), 1e-6, 6e-8);
}

// ---- safetensors reader / writer ----

SafetensorsFile sample_file() {
  SafetensorsFile f;
  const DType types[] = {DType::kFloat64, DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                         DType::kInt32,   DType::kInt64,   DType::kBool};
  int k = 0;
  for (DType t : types) {
    HostTensor h = make_host_tensor(t, {2, 3});
    for (size_t i = 0; i < h.bytes.size(); ++i) h.bytes[i] = static_cast<uint8_t>(i * 7 + k);
    f.tensors["t" + std::to_string(k++)] = h;
  }
  f.tensors["empty"] = make_host_tensor(DType::kFloat32, {0, 4});
  f.tensors["scalar"] = make_host_tensor(DType::kInt32, {});
  f.metadata["format"] = "pt";
  f.params = {{"op", "causal_conv1d_fwd"}, {"width", 4}, {"scale", 0.125}};
  return f;
}

std::vector<uint8_t> serialize(const SafetensorsFile& f) {
  std::vector<uint8_t> b;
  Status s = serialize_safetensors(f, &b);
  EXPECT_TRUE(s.ok()) << s.message();
  return b;
}

// A file image with the given header text and `data_bytes` zero bytes of data.
std::vector<uint8_t> image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  for (size_t i = 0; i < header.size(); ++i) b[8 + i] = static_cast<uint8_t>(header[i]);
  return b;
}

Status parse(const std::vector<uint8_t>& b) {
  SafetensorsFile f;
  return parse_safetensors(b.data(), b.size(), "test", &f);
}

TEST(Safetensors, RoundTrip) {
  const SafetensorsFile f = sample_file();
  const std::vector<uint8_t> b = serialize(f);
  SafetensorsFile g;
  Status s = parse_safetensors(b.data(), b.size(), "roundtrip", &g);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (const auto& [name, t] : f.tensors) {
    const HostTensor* u = g.find(name);
    ASSERT_NE(u, nullptr) << name;
    EXPECT_EQ(u->dtype, t.dtype) << name;
    EXPECT_EQ(u->shape, t.shape) << name;
    EXPECT_EQ(u->bytes, t.bytes) << name;
  }
  EXPECT_EQ(g.metadata, f.metadata);
  EXPECT_EQ(g.params, f.params);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b[i];
  EXPECT_EQ((8 + n) % 8, 0u) << "data section should be 8-byte aligned";
}

TEST(Safetensors, WriteAndReadFile) {
  const std::string path = ::testing::TempDir() + "/gdn_safetensors_roundtrip.safetensors";
  ASSERT_TRUE(write_safetensors(path, sample_file()).ok());
  SafetensorsFile g;
  Status s = read_safetensors(path, &g);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(g.params["op"], "causal_conv1d_fwd");
  EXPECT_FALSE(read_safetensors(path + ".missing", &g).ok());
  std::remove(path.c_str());
}

TEST(Safetensors, ReadsGoldenFiles) {
  for (const std::string& path : golden_files()) {
    SafetensorsFile f;
    Status s = read_safetensors(path, &f);
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(f.params.contains("op")) << path;
  }
}

TEST(Safetensors, EveryTruncationIsAnError) {
  const std::vector<uint8_t> b = serialize(sample_file());
  for (size_t n = 0; n < b.size(); ++n) {
    std::vector<uint8_t> cut(b.begin(), b.begin() + n);
    EXPECT_FALSE(parse(cut).ok()) << "prefix of " << n << " bytes";
  }
}

TEST(Safetensors, CorruptHeaderBytesNeverCrash) {
  const std::vector<uint8_t> b = serialize(sample_file());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b[i];
  const uint8_t values[] = {0, '"', '[', ']', '{', '}', ',', ':', '-', '9', 0xff};
  for (size_t i = 0; i < 8 + n; ++i) {
    for (uint8_t v : values) {
      std::vector<uint8_t> c = b;
      c[i] = v;
      SafetensorsFile f;
      Status s = parse_safetensors(c.data(), c.size(), "fuzz", &f);  // ok or error, no crash
      if (s.ok()) {
        for (const auto& [name, t] : f.tensors)
          EXPECT_EQ(t.bytes.size(), static_cast<size_t>(t.numel()) * dtype_size(t.dtype)) << name;
      }
    }
  }
}

TEST(Safetensors, RejectsMalformedHeaders) {
  const std::string ok_entry = R"("t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  EXPECT_TRUE(parse(image("{" + ok_entry + "}", 8)).ok());
  struct Bad {
    const char* why;
    std::string header;
    size_t data;
  };
  const Bad bad[] = {
      {"not JSON", "{\"t\": ", 8},
      {"not an object", "[1, 2]", 8},
      {"unknown dtype", R"({"t": {"dtype": "F8", "shape": [2], "data_offsets": [0, 8]}})", 8},
      {"dtype not a string", R"({"t": {"dtype": 3, "shape": [2], "data_offsets": [0, 8]}})", 8},
      {"negative dim", R"({"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8},
      {"float dim", R"({"t": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", 8},
      {"huge dims", R"({"t": {"dtype": "F64", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 8]}})", 8},
      {"size mismatch", R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8},
      {"end past data", R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", 8},
      {"begin > end", R"({"t": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})", 8},
      {"offsets arity", R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", 8},
      {"missing shape", R"({"t": {"dtype": "F32", "data_offsets": [0, 8]}})", 8},
      {"overlap", R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "u": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8},
      {"metadata not strings", "{" + ok_entry + R"(, "__metadata__": {"params": 3}})", 8},
      {"params not JSON", "{" + ok_entry + R"(, "__metadata__": {"params": "{op"}})", 8},
  };
  for (const Bad& c : bad) {
    Status s = parse(image(c.header, c.data));
    EXPECT_FALSE(s.ok()) << c.why;
    EXPECT_FALSE(s.message().empty()) << c.why;
  }
  // Header length larger than the file, zero, or absurd.
  std::vector<uint8_t> b = image("{" + ok_entry + "}", 8);
  b[0] = 0xff;
  b[1] = 0xff;
  EXPECT_FALSE(parse(b).ok());
  b = image("", 0);
  EXPECT_FALSE(parse(b).ok());
  b = image("{" + ok_entry + "}", 8);
  b[7] = 0x80;
  EXPECT_FALSE(parse(b).ok());
}

}  // namespace
}  // namespace gdn::capture
