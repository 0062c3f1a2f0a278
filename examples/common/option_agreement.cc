#include "option_agreement.h"

#include <CLI/CLI.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/comm/agreement.h"
#include "cohort/core/error.h"

namespace cohort_examples {

void agree_on_options(cohort::Group& group, const CLI::App& app) {
  std::vector<std::string> lines;
  std::istringstream config(app.config_to_str(/*default_also=*/true, /*write_description=*/false));
  for (std::string line; std::getline(config, line);) {
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  }
  const std::string difference = cohort::first_disagreement(group, lines, "option");
  if (difference.empty()) return;
  throw cohort::ConfigError(
      "the ranks were started with different options: " + difference +
      ". Start every rank with the same command line (cohortrun does; check the launcher's "
      "per-rank arguments)");
}

}  // namespace cohort_examples
