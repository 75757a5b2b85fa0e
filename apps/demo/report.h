// apps/demo/report.h — the demo's summary table, its JSON form and the progress bar line.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "demo/run.h"

namespace gdn::demo {

double tokens_per_second(const EngineStats& s);
double mean_accepted_length(const EngineStats& s);

std::string summary_table(const DemoConfig& cfg, const DemoResult& res);
nlohmann::json summary_json(const DemoConfig& cfg, const DemoResult& res);
std::string mismatch_message(const Mismatch& m);  // "request 3, step 17, position 5: ..."

// One line, e.g. "[#########.........]  340/672 tokens  step 41  5/12 done" (width in characters).
std::string progress_line(const DemoProgress& p, int width);

}  // namespace gdn::demo
