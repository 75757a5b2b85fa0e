// gdn demo — a speculative-decoding engine in miniature, checked against plain greedy decoding.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <type_traits>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "demo/report.h"
#include "demo/run.h"

namespace gdn::cli {
namespace {

using demo::DemoConfig;

void usage(FILE* f) {
  std::fprintf(f,
      "usage: gdn demo [options]\n"
      "A continuous-batching engine drives gdn_attention (one call per layer per step) with mixed\n"
      "batches of prefills, chunked-prefill pieces, plain decodes and verify sequences with ragged\n"
      "draft counts, a slot pool of 1 + num_spec slots per request and CUDA-graph-style padding.\n"
      "A plain greedy engine runs alongside on the same model; every token must match (exit 1 if not).\n"
      "Prints a progress bar (stderr, on a terminal), a summary table and its JSON (stdout).\n\n"
      "model\n"
      "  --preset NAME         tiny | small (default) | qwen3-next (real layer shapes: hidden 2048,\n"
      "                        16/32 heads, K = V = 128; small vocabulary, 2 layers, small workload)\n"
      "  --short               the short configuration that make test runs\n"
      "  --layers N --hidden N --vocab N --heads-k N --heads-v N --head-k-dim N --head-v-dim N\n"
      "  --conv-width N        override the preset (heads-v must be a multiple of heads-k)\n"
      "  --block-layout        projections as [q|k|v|z] (Qwen3.5) instead of interleaved (Qwen3-Next)\n"
      "  --weights PATH        load the target from safetensors (Hugging Face Qwen3-Next names)\n"
      "  --save-weights PATH   write the target weights as safetensors\n"
      "  --seed N              weights, prompts, arrivals (default 1)\n"
      "workload\n"
      "  --requests N --prompt-len MIN:MAX --gen-len MIN:MAX --arrival-gap STEPS\n"
      "speculation\n"
      "  --num-spec K          drafts per step at most (default 3; 0: no speculation)\n"
      "  --proposer P          draft | ngram | mixed (default: alternate per request) | none\n"
      "  --draft-noise E       draft model = target + E x init scale noise (default 0.05; 0 = the target)\n"
      "  --corrupt P           replace each drafted token by another with probability P (default 0)\n"
      "  --ngram MIN:MAX       n-gram lengths for prompt lookup (default 1:4)\n"
      "engine\n"
      "  --max-running N --token-budget N --prefill-chunk N\n"
      "  --deferred            deferred-commit verify: one state slot per request, the step's tokens\n"
      "                        logged and replayed at the next commit\n"
      "  --tree N              with --deferred: token-tree drafts of up to N nodes (depth <= num-spec):\n"
      "                        the draft model's top-B tokens at each of the first L levels, its top-1\n"
      "                        below, best rank paths first; verified in one sequence, the longest\n"
      "                        matching root-to-node path accepted and replayed (n-gram: chains)\n"
      "  --tree-branch B       candidates per node at the branching levels (default 2; 1 = a chain)\n"
      "  --tree-levels L       levels that branch (default 2)\n"
      "  --no-pad              do not pad decode-only steps like CUDA-graph replays\n"
      "  --no-check-metadata   skip gdn::check_metadata before each call\n"
      "  --device cpu|cuda     where gdn_attention, the pools and the metadata live; with cuda the\n"
      "                        dense matmuls of the model stay on the host (activations are copied)\n"
      "  --threads N           matmul threads (default: cores, at most 8)\n"
      "output\n"
      "  --json PATH           also write the JSON summary to PATH\n"
      "  --no-progress         no progress bar\n"
      "  --inject-fault        feed back num_accepted_tokens - 1 after an acceptance, to see the\n"
      "                        lossless check fail (exit 1)\n");
}

constexpr int64_t kIntMin = std::numeric_limits<int>::min(), kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

bool parse_range(const std::string& s, int* lo, int* hi) {
  const size_t colon = s.find(':');
  int64_t a = 0, b = 0;
  if (colon == std::string::npos) {
    if (!parse_int(s, kIntMin, kIntMax, &a)) return false;
    b = a;
  } else if (!parse_int(s.substr(0, colon), kIntMin, kIntMax, &a) ||
             !parse_int(s.substr(colon + 1), kIntMin, kIntMax, &b)) {
    return false;
  }
  *lo = static_cast<int>(a);
  *hi = static_cast<int>(b);
  return true;
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "gdn demo: %s\n", msg.c_str());
  return 2;
}

}  // namespace

int cmd_demo(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  DemoConfig cfg;
  std::string json_path;
  bool show_progress = true;
  // Pass 1: the preset, so that later flags override it whatever their order.
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      usage(stdout);
      return 0;
    }
    if (args[i] == "--short") cfg = demo::short_demo_config();
    if (args[i] == "--preset" && i + 1 == args.size()) return fail("--preset needs a value");
    if (args[i] == "--preset") {
      cfg.preset = args[i + 1];
      const Status s = demo::apply_preset(&cfg);
      if (!s.ok()) return fail(s.message());
      if (cfg.preset == "qwen3-next") {  // real layer shapes: keep the CPU run short
        cfg.requests = 4;
        cfg.prompt_min = 8;
        cfg.prompt_max = 40;
        cfg.gen_min = 8;
        cfg.gen_max = 16;
        cfg.max_running = 4;
      }
    }
  }
  demo::ModelConfig& m = cfg.model;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string* v) {
      if (i + 1 >= args.size()) return false;
      *v = args[++i];
      return true;
    };
    std::string v;
    int64_t n = 0;
    auto int_flag = [&](const char* name, auto* field) -> int {  // an integer of the field's type
      if (a != name) return 0;
      using T = std::remove_pointer_t<decltype(field)>;
      const bool narrow = std::is_same_v<T, int>;
      const int64_t lo = narrow ? kIntMin : std::is_signed_v<T> ? std::numeric_limits<int64_t>::min() : 0;
      if (!value(&v) || !parse_int(v, lo, narrow ? kIntMax : kI64Max, &n)) return -1;
      *field = static_cast<std::remove_pointer_t<decltype(field)>>(n);
      return 1;
    };
    int r = 0;
    for (auto [name, field] : std::initializer_list<std::pair<const char*, int64_t*>>{
             {"--layers", &m.layers},        {"--hidden", &m.hidden},         {"--vocab", &m.vocab},
             {"--heads-k", &m.num_k_heads},  {"--heads-v", &m.num_v_heads},   {"--head-k-dim", &m.head_k_dim},
             {"--head-v-dim", &m.head_v_dim}, {"--conv-width", &m.conv_width}}) {
      if (!r) r = int_flag(name, field);
    }
    for (auto [name, field] : std::initializer_list<std::pair<const char*, int*>>{
             {"--requests", &cfg.requests},         {"--arrival-gap", &cfg.arrival_gap},
             {"--num-spec", &cfg.num_spec},         {"--max-running", &cfg.max_running},
             {"--token-budget", &cfg.token_budget}, {"--prefill-chunk", &cfg.prefill_chunk},
             {"--threads", &cfg.threads},           {"--tree", &cfg.tree},
             {"--tree-branch", &cfg.tree_branch},   {"--tree-levels", &cfg.tree_levels}}) {
      if (!r) r = int_flag(name, field);
    }
    if (!r) r = int_flag("--seed", &cfg.seed);
    if (r < 0) return fail(a + " needs an integer in its type's range, got '" + v + "'");
    if (r > 0) continue;
    if (a == "--short" || a == "--preset") {
      if (a == "--preset") ++i;
    } else if (a == "--block-layout") {
      m.block_layout = true;
    } else if (a == "--weights" || a == "--save-weights" || a == "--proposer" || a == "--json" || a == "--device") {
      if (!value(&v)) return fail(a + " needs a value");
      if (a == "--weights") cfg.weights_path = v;
      if (a == "--save-weights") cfg.save_weights_path = v;
      if (a == "--proposer") cfg.proposer = v;
      if (a == "--json") json_path = v;
      if (a == "--device") {
        const Status s = demo::parse_device(v, &cfg.device);
        if (!s.ok()) return fail(s.message());
      }
    } else if (a == "--draft-noise" || a == "--corrupt") {
      if (!value(&v)) return fail(a + " needs a number");
      double d = 0;
      if (!parse_number(v, -1e300, 1e300, &d)) return fail(a + " needs a finite number, got '" + v + "'");
      (a == "--draft-noise" ? cfg.draft_noise : cfg.corrupt) = d;
    } else if (a == "--prompt-len" || a == "--gen-len" || a == "--ngram") {
      int lo = 0, hi = 0;
      if (!value(&v) || !parse_range(v, &lo, &hi)) return fail(a + " needs MIN:MAX, got '" + v + "'");
      if (a == "--prompt-len") cfg.prompt_min = lo, cfg.prompt_max = hi;
      if (a == "--gen-len") cfg.gen_min = lo, cfg.gen_max = hi;
      if (a == "--ngram") cfg.ngram_min = lo, cfg.ngram_max = hi;
    } else if (a == "--no-pad") {
      cfg.pad = false;
    } else if (a == "--no-check-metadata") {
      cfg.check_metadata = false;
    } else if (a == "--inject-fault") {
      cfg.inject_fault = true;
    } else if (a == "--deferred") {
      cfg.deferred = true;
    } else if (a == "--no-progress") {
      show_progress = false;
    } else {
      usage(stderr);
      return fail("unknown option '" + a + "'");
    }
  }

  const bool tty = show_progress && isatty(STDERR_FILENO);
  demo::DemoResult res;
  auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  const Status s = demo::run_demo(cfg, &res, [&](const demo::DemoProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (!tty || now - last < std::chrono::milliseconds(40)) return;  // redraw at most 25 times a second
    last = now;
    std::fprintf(stderr, "\r%s", demo::progress_line(p, 100).c_str());
  });
  if (tty) std::fprintf(stderr, "\r%*s\r", 100, "");
  if (!s.ok()) return fail(s.message());
  if (!res.lossless) std::fprintf(stderr, "gdn demo: LOSSLESS CHECK FAILED: %s\n", demo::mismatch_message(*res.mismatch).c_str());
  std::fputs(demo::summary_table(cfg, res).c_str(), stdout);
  const std::string json = demo::summary_json(cfg, res).dump(2);
  std::printf("%s\n", json.c_str());
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << json << "\n";
    if (!f) return fail("could not write --json " + json_path);
  }
  return res.lossless ? 0 : 1;
}

}  // namespace gdn::cli
