// tools/capture/case.h — load one golden/capture case, run it on a backend, compare to the file.
//
// A case file (safetensors, see tests/data/golden/README.md) holds `in.<arg>` tensors, expected
// `out.<name>` (storage dtype) and `out.<name>_f64` values, and `params` with `op` and the scalar
// arguments. run_case builds the op's argument struct from working copies of the inputs, fills
// the outputs (y / o / core_attn_out / z) with the caller's fill value, runs the op through
// runner.h and checks every output:
//   * y, o, core_attn_out: rel. L2 error over the rows the op writes (from the metadata, docs/contract.md §3) against out.<name>_f64 (else out.<name>); tolerance from the golden
//     README (activations f32: 1e-5, bf16/fp16: 1e-2). Rows the op never writes (past the last
//     sequence, core_attn_out/z rows >= num_actual_tokens) must still hold the fill, bit for bit.
//   * conv_state and z: bit-exact against out.<name> (z: rows < num_actual_tokens).
//   * ssm_state: rel. L2 error over the slots the rules write (f32 storage with f32 activations:
//     1e-5, else 1e-2); every other slot bit-identical to the input. A reference that changes a
//     slot outside the computed write set is reported as a failure too (the rules and the file
//     disagree).
// NaN in a compared element fails.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "capture/runner.h"
#include "capture/safetensors.h"

namespace gdn::capture {

struct GoldenCase {
  std::string name;  // file name without directory and extension
  std::string path;
  std::string op;    // params.op
  SafetensorsFile file;
};

struct RunOptions {
  // Written into every output element before the call (converted to the output dtype).
  double fill = std::numeric_limits<double>::quiet_NaN();
  // Extra elements between slots of the working conv/ssm pools (a strided pool, docs/contract.md §2); the
  // padding is filled with a byte pattern that must survive the call.
  int64_t pool_slot_pad = 0;
};

struct OutputCheck {
  std::string name;            // "y", "o", "core_attn_out", "z", "conv_state", "ssm_state"
  bool exact = false;          // bit-exact required (conv_state, z)
  bool has_reference = false;  // out.<name> present in the file
  double rel_err = 0;          // tolerance checks: ||x - ref|| / ||ref|| over the written elements
  double tol = 0;
  int64_t compared = 0;            // written elements compared against the reference
  int64_t inexact = 0;             // of those, not bit-identical to out.<name>
  int64_t untouched_changed = 0;   // elements outside the write set that did not survive
  bool pass = false;
  std::string detail;              // the first problem, in words (empty when it passes)
};

struct CaseResult {
  std::string name;
  std::string op;
  Backend backend = Backend::kCPU;
  Status status;  // setup or op status; a failed status fails the case
  std::vector<OutputCheck> outputs;
  bool pass = false;
  double ms = 0;  // wall time of the run_*_on call (includes host<->device copies on CUDA)
};

Status load_case(const std::string& path, GoldenCase* out);
CaseResult run_case(const GoldenCase& c, Backend backend, const RunOptions& options = {});

// The *.safetensors files of a directory, sorted by name (empty if none or not a directory).
std::vector<std::string> list_case_files(const std::string& dir);

}  // namespace gdn::capture
