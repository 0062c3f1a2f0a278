#include "checkpoint/shard_manifest.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "checkpoint/checkpoint_file.h"
#include "cohort/core/check.h"

namespace cohort::detail {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "cohort sharded checkpoint";
constexpr int kVersion = 1;

json sampler_json(const SamplerRecord& s) {
  return {{"dataset_size", s.dataset_size},
          {"seed", s.seed},
          {"shuffle", s.shuffle},
          {"epoch", s.epoch},
          {"consumed", s.consumed}};
}

SamplerRecord sampler_from(const json& j) {
  SamplerRecord s;
  s.dataset_size = j.at("dataset_size").get<int64_t>();
  s.seed = j.at("seed").get<int64_t>();
  s.shuffle = j.at("shuffle").get<bool>();
  s.epoch = j.at("epoch").get<int64_t>();
  s.consumed = j.at("consumed").get<int64_t>();
  return s;
}

json tensor_json(const ManifestTensor& t) {
  json pieces = json::array();
  for (const ManifestPiece& p : t.pieces) {
    pieces.push_back({{"rank", p.rank}, {"offset", p.offset}, {"length", p.length}});
  }
  return {{"name", t.name},
          {"kind", t.buffer ? "buffer" : "parameter"},
          {"shape", t.shape},
          {"dtype", t.dtype},
          {"pieces", pieces}};
}

json optimizer_json(const ManifestOptimizer& o) {
  json groups = json::array();
  for (const ManifestParamGroup& g : o.groups) {
    groups.push_back({{"options", g.options}, {"params", g.params}});
  }
  return {{"kind", o.kind}, {"param_groups", groups}};
}

// Every check of parse_manifest that is not the JSON's own: throws a message for
// throw_malformed.
struct Invalid {
  std::string what;
};

void check_pieces(const ManifestTensor& t, int world_size) {
  for (int64_t d : t.shape) {
    if (d < 0) throw Invalid{concat("'", t.name, "' has a negative dimension")};
  }
  int64_t end = 0;
  for (const ManifestPiece& p : t.pieces) {
    if (p.rank < 0 || p.rank >= world_size || p.length <= 0 || p.offset != end) {
      throw Invalid{concat("the pieces of '", t.name,
                           "' do not cover it exactly once in order (rank ", p.rank, ", [",
                           p.offset, ", +", p.length, ") after element ", end, ")")};
    }
    end += p.length;
  }
  if (end != t.numel()) {
    throw Invalid{
        concat("the pieces of '", t.name, "' cover ", end, " of its ", t.numel(), " elements")};
  }
}

ManifestTensor tensor_from(const json& j, int world_size) {
  ManifestTensor t;
  t.name = j.at("name").get<std::string>();
  const std::string kind = j.at("kind").get<std::string>();
  if (kind != "parameter" && kind != "buffer") {
    throw Invalid{concat("'", t.name, "' is of kind '", kind, "'")};
  }
  t.buffer = kind == "buffer";
  t.shape = j.at("shape").get<std::vector<int64_t>>();
  t.dtype = j.at("dtype").get<std::string>();
  for (const json& p : j.at("pieces")) {
    t.pieces.push_back(
        {p.at("rank").get<int>(), p.at("offset").get<int64_t>(), p.at("length").get<int64_t>()});
  }
  check_pieces(t, world_size);
  return t;
}

// Rank `rank`'s file; its name is the one a save of `token` gives it, never a path elsewhere.
ManifestFile file_from(const json& j, int rank, int world_size, const std::string& token) {
  ManifestFile f;
  f.name = j.at("name").get<std::string>();
  f.bytes = j.at("bytes").get<uint64_t>();
  const std::string crc = j.at("crc32").get<std::string>();
  if (j.at("rank").get<int>() != rank || f.name != shard_file_name(rank, world_size, token)) {
    throw Invalid{concat("its file entry ", rank, " ('", f.name, "') is not rank ", rank,
                         "'s shard file of save ", token)};
  }
  if (crc.size() != 10 || crc.rfind("0x", 0) != 0) {
    throw Invalid{concat("the CRC-32 of '", f.name, "' is '", crc, "'")};
  }
  f.crc32 = static_cast<uint32_t>(std::stoul(crc.substr(2), nullptr, 16));
  return f;
}

ManifestOptimizer optimizer_from(const json& j) {
  ManifestOptimizer o;
  o.kind = j.at("kind").get<std::string>();
  for (const json& g : j.at("param_groups")) {
    o.groups.push_back({g.at("options"), g.at("params").get<std::vector<std::string>>()});
  }
  return o;
}

Manifest manifest_from(const json& j) {
  if (j.at("format").get<std::string>() != kFormat)
    throw Invalid{"its format is not " + std::string(kFormat)};
  Manifest m;
  m.world_size = j.at("world_size").get<int>();
  if (m.world_size < 1) throw Invalid{concat("its world size is ", m.world_size)};
  m.token = j.at("token").get<std::string>();
  if (m.token.empty() || m.token.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw Invalid{"its token '" + m.token + "' is not a hexadecimal number"};
  }
  m.job_id = j.value("job_id", std::string());
  m.step = j.at("step").get<int64_t>();
  m.epoch = j.at("epoch").get<int64_t>();
  m.rng = j.at("rng").get<bool>();
  if (j.contains("sampler")) m.sampler = sampler_from(j.at("sampler"));
  if (j.contains("grad_scaler")) {
    amp::GradScalerState scaler;
    scaler.scale = j.at("grad_scaler").at("scale").get<double>();
    scaler.growth_tracker = j.at("grad_scaler").at("growth_tracker").get<int64_t>();
    if (!scaler.valid()) {
      throw Invalid{concat("its grad_scaler holds scale ", scaler.scale, " and growth count ",
                           scaler.growth_tracker)};
    }
    m.grad_scaler = scaler;
  }
  if (j.contains("lr_scheduler")) {
    optim::LrSchedulerState schedule;
    schedule.step = j.at("lr_scheduler").at("step").get<int64_t>();
    schedule.base_lrs = j.at("lr_scheduler").at("base_lrs").get<std::vector<double>>();
    if (!schedule.valid()) {
      throw Invalid{concat("its lr_scheduler holds step ", schedule.step,
                           " and a base LR that is negative or not finite")};
    }
    m.lr_scheduler = schedule;
  }
  if (j.contains("optimizer")) m.optimizer = optimizer_from(j.at("optimizer"));
  std::set<std::string> names;
  for (const json& t : j.at("tensors")) {
    m.tensors.push_back(tensor_from(t, m.world_size));
    if (!names.insert(m.tensors.back().name).second) {
      throw Invalid{concat("it lists '", m.tensors.back().name, "' twice")};
    }
  }
  const json& files = j.at("files");
  if (files.size() != static_cast<size_t>(m.world_size)) {
    throw Invalid{concat("it lists ", files.size(), " files for ", m.world_size, " ranks")};
  }
  for (int r = 0; r < m.world_size; ++r) {
    m.files.push_back(file_from(files.at(static_cast<size_t>(r)), r, m.world_size, m.token));
  }
  return m;
}

std::string describe(const std::string& dtype, const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << dtype << " " << c10::IntArrayRef(shape);
  return out.str();
}

const char* kind_name(bool buffer) {
  return buffer ? "a buffer" : "a parameter";
}

size_t match_one(const std::string& checkpoint, const std::map<std::string, size_t>& index,
                 const Manifest& manifest, const std::string& name, torch::ScalarType type,
                 const std::vector<int64_t>& shape, bool buffer) {
  const auto it = index.find(name);
  if (it == index.end()) {
    throw_mismatch(checkpoint, concat("the model has '", name, "' but the checkpoint does not"));
  }
  const ManifestTensor& saved = manifest.tensors[it->second];
  const std::string dtype = c10::toString(type);
  if (saved.dtype != dtype || saved.shape != shape) {
    throw_mismatch(checkpoint,
                   concat("'", name, "' is ", describe(saved.dtype, saved.shape),
                          " in the checkpoint but ", describe(dtype, shape), " in the model"));
  }
  if (saved.buffer != buffer) {
    throw_mismatch(checkpoint,
                   concat("'", name, "' is ", kind_name(saved.buffer), " in the checkpoint but ",
                          kind_name(buffer), " in the model"));
  }
  return it->second;
}

}  // namespace

int64_t ManifestTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shard_file_name(int rank, int world_size, const std::string& token) {
  char text[64];
  std::snprintf(text, sizeof text, "shard-%05d-of-%05d.", rank, world_size);
  return text + token + ".ckpt";
}

std::optional<std::string> token_of_shard_file(const std::string& name) {
  int rank = 0, world = 0, consumed = 0;
  const std::string suffix = ".ckpt";
  if (std::sscanf(name.c_str(), "shard-%5d-of-%5d.%n", &rank, &world, &consumed) != 2 ||
      consumed == 0 || name.size() <= consumed + suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  const std::string token =
      name.substr(static_cast<size_t>(consumed), name.size() - consumed - suffix.size());
  if (token.find_first_not_of("0123456789abcdef") != std::string::npos) return std::nullopt;
  if (shard_file_name(rank, world, token) != name) return std::nullopt;
  return token;
}

std::string manifest_text(const Manifest& m) {
  json j = {{"format", kFormat}, {"version", kVersion}, {"world_size", m.world_size},
            {"token", m.token},  {"step", m.step},      {"epoch", m.epoch},
            {"rng", m.rng}};
  if (!m.job_id.empty()) j["job_id"] = m.job_id;
  if (m.sampler) j["sampler"] = sampler_json(*m.sampler);
  if (m.grad_scaler) {
    j["grad_scaler"] = {{"scale", m.grad_scaler->scale},
                        {"growth_tracker", m.grad_scaler->growth_tracker}};
  }
  if (m.lr_scheduler) {
    j["lr_scheduler"] = {{"step", m.lr_scheduler->step}, {"base_lrs", m.lr_scheduler->base_lrs}};
  }
  if (m.optimizer) j["optimizer"] = optimizer_json(*m.optimizer);
  j["tensors"] = json::array();
  for (const ManifestTensor& t : m.tensors) j["tensors"].push_back(tensor_json(t));
  j["files"] = json::array();
  for (size_t r = 0; r < m.files.size(); ++r) {
    const ManifestFile& f = m.files[r];
    j["files"].push_back(
        {{"rank", r}, {"name", f.name}, {"bytes", f.bytes}, {"crc32", hex32(f.crc32)}});
  }
  return j.dump(1);
}

Manifest parse_manifest(const std::string& path, const std::string& text) {
  try {
    const json j = json::parse(text);
    const int version = j.at("version").get<int>();
    if (version != kVersion) {
      throw CheckpointError(concat("checkpoint '", path, "' has format version ", version,
                                   ", but this build of cohort reads version ", kVersion,
                                   "; load it with the cohort version that wrote it"));
    }
    return manifest_from(j);
  } catch (const json::exception& error) {
    throw_malformed(path, concat("its manifest is not what cohort writes (", error.what(), ")"));
  } catch (const Invalid& invalid) {
    throw_malformed(path, "its manifest is inconsistent: " + invalid.what);
  }
}

TensorMatch match_tensors(const std::string& checkpoint, const Manifest& manifest,
                          const RankHoldings& holdings) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < manifest.tensors.size(); ++i) index[manifest.tensors[i].name] = i;
  TensorMatch match;
  std::set<size_t> matched;
  for (const ParameterShard& shard : holdings.shards) {
    match.shards.push_back(
        match_one(checkpoint, index, manifest, shard.name, shard.dtype, shard.shape, false));
    matched.insert(match.shards.back());
  }
  for (const UnshardedTensor& t : holdings.unsharded) {
    match.unsharded.push_back(match_one(checkpoint, index, manifest, t.name, t.tensor.scalar_type(),
                                        t.tensor.sizes().vec(), t.buffer));
    matched.insert(match.unsharded.back());
  }
  for (size_t i = 0; i < manifest.tensors.size(); ++i) {
    if (matched.count(i) != 0) continue;
    throw_mismatch(checkpoint, concat("the checkpoint has '", manifest.tensors[i].name,
                                      "' but the model does not"));
  }
  return match;
}

}  // namespace cohort::detail
