#include "shard/optimizer_codec.h"

#include <cmath>
#include <limits>
#include <tuple>

#include "cohort/torch/optim/lamb.h"
#include "cohort/torch/optim/lars.h"
#include "optim/trust_ratio.h"

namespace cohort::detail {
namespace {

using nlohmann::json;
using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamState;

template <typename State>
struct TensorField {
  const char* name;
  torch::Tensor (*get)(const State&);
  void (*set)(State&, const torch::Tensor&);
};

// One optimizer class: Traits gives its types, its state tensors and its options.
template <typename Traits>
class Codec final : public OptimizerCodec {
 public:
  using Optimizer = typename Traits::Optimizer;
  using Options = typename Traits::Options;
  using State = typename Traits::State;

  const char* kind() const override { return Traits::kKind; }

  bool matches(const torch::optim::Optimizer& optimizer) const override {
    return dynamic_cast<const Optimizer*>(&optimizer) != nullptr;
  }

  json options_json(const OptimizerOptions& options) const override {
    return Traits::to_json(static_cast<const Options&>(options));
  }

  std::unique_ptr<OptimizerOptions> options_from_json(
      const json& saved, const OptimizerOptions& options) const override {
    auto copy = std::make_unique<Options>(static_cast<const Options&>(options));
    Traits::from_json(saved, *copy);
    return copy;
  }

  FlatState read_state(const OptimizerParamState& state) const override {
    const auto& typed = static_cast<const State&>(state);
    FlatState flat;
    if constexpr (Traits::kHasStep) {
      flat.has_step = true;
      flat.step = typed.step();
    }
    for (const auto& field : Traits::fields()) {
      torch::Tensor tensor = field.get(typed);
      if (tensor.defined()) flat.fields.emplace_back(field.name, std::move(tensor));
    }
    return flat;
  }

  std::unique_ptr<OptimizerParamState> make_state(const FlatState& flat) const override {
    auto state = std::make_unique<State>();
    if constexpr (Traits::kHasStep) state->step(flat.step);
    for (const auto& field : Traits::fields()) {
      for (const auto& [name, tensor] : flat.fields) {
        if (name == field.name) field.set(*state, tensor);
      }
    }
    return state;
  }

  std::unique_ptr<torch::optim::Optimizer> make_optimizer(
      std::vector<torch::optim::OptimizerParamGroup> groups,
      const OptimizerOptions& defaults) const override {
    return std::make_unique<Optimizer>(std::move(groups), static_cast<const Options&>(defaults));
  }
};

// TORCH_ARG accessors, as the function pointers of TensorField.
#define COHORT_STATE_FIELD(StateType, field)                                                      \
  TensorField<StateType> {                                                                        \
#field, [](const StateType& s) { return s.field(); },                                         \
                                                       [](StateType & s,                          \
                                                          const torch::Tensor& t) { s.field(t); } \
  }

struct SgdTraits {
  using Optimizer = torch::optim::SGD;
  using Options = torch::optim::SGDOptions;
  using State = torch::optim::SGDParamState;
  static constexpr const char* kKind = "SGD";
  static constexpr bool kHasStep = false;
  static std::vector<TensorField<State>> fields() {
    return {COHORT_STATE_FIELD(State, momentum_buffer)};
  }
  static json to_json(const Options& o) {
    return {{"lr", o.lr()},
            {"momentum", o.momentum()},
            {"dampening", o.dampening()},
            {"weight_decay", o.weight_decay()},
            {"nesterov", o.nesterov()}};
  }
  static void from_json(const json& j, Options& o) {
    o.lr(j.at("lr").get<double>())
        .momentum(j.at("momentum").get<double>())
        .dampening(j.at("dampening").get<double>())
        .weight_decay(j.at("weight_decay").get<double>())
        .nesterov(j.at("nesterov").get<bool>());
  }
};

// Adam and AdamW keep the same state and options.
template <typename OptimizerType, typename OptionsType, typename StateType>
struct AdamFamilyTraits {
  using Optimizer = OptimizerType;
  using Options = OptionsType;
  using State = StateType;
  static constexpr bool kHasStep = true;
  static std::vector<TensorField<State>> fields() {
    return {COHORT_STATE_FIELD(State, exp_avg), COHORT_STATE_FIELD(State, exp_avg_sq),
            COHORT_STATE_FIELD(State, max_exp_avg_sq)};
  }
  static json to_json(const Options& o) {
    return {{"lr", o.lr()},
            {"betas", {std::get<0>(o.betas()), std::get<1>(o.betas())}},
            {"eps", o.eps()},
            {"weight_decay", o.weight_decay()},
            {"amsgrad", o.amsgrad()}};
  }
  static void from_json(const json& j, Options& o) {
    const auto& betas = j.at("betas");
    o.lr(j.at("lr").get<double>())
        .betas(std::make_tuple(betas.at(0).get<double>(), betas.at(1).get<double>()))
        .eps(j.at("eps").get<double>())
        .weight_decay(j.at("weight_decay").get<double>())
        .amsgrad(j.at("amsgrad").get<bool>());
  }
};

struct AdamTraits : AdamFamilyTraits<torch::optim::Adam, torch::optim::AdamOptions,
                                     torch::optim::AdamParamState> {
  static constexpr const char* kKind = "Adam";
};

struct AdamWTraits : AdamFamilyTraits<torch::optim::AdamW, torch::optim::AdamWOptions,
                                      torch::optim::AdamWParamState> {
  static constexpr const char* kKind = "AdamW";
};

struct AdagradTraits {
  using Optimizer = torch::optim::Adagrad;
  using Options = torch::optim::AdagradOptions;
  using State = torch::optim::AdagradParamState;
  static constexpr const char* kKind = "Adagrad";
  static constexpr bool kHasStep = true;
  static std::vector<TensorField<State>> fields() { return {COHORT_STATE_FIELD(State, sum)}; }
  static json to_json(const Options& o) {
    return {{"lr", o.lr()},
            {"lr_decay", o.lr_decay()},
            {"weight_decay", o.weight_decay()},
            {"initial_accumulator_value", o.initial_accumulator_value()},
            {"eps", o.eps()}};
  }
  static void from_json(const json& j, Options& o) {
    o.lr(j.at("lr").get<double>())
        .lr_decay(j.at("lr_decay").get<double>())
        .weight_decay(j.at("weight_decay").get<double>())
        .initial_accumulator_value(j.at("initial_accumulator_value").get<double>())
        .eps(j.at("eps").get<double>());
  }
};

struct RmspropTraits {
  using Optimizer = torch::optim::RMSprop;
  using Options = torch::optim::RMSpropOptions;
  using State = torch::optim::RMSpropParamState;
  static constexpr const char* kKind = "RMSprop";
  static constexpr bool kHasStep = true;
  static std::vector<TensorField<State>> fields() {
    return {COHORT_STATE_FIELD(State, square_avg), COHORT_STATE_FIELD(State, momentum_buffer),
            COHORT_STATE_FIELD(State, grad_avg)};
  }
  static json to_json(const Options& o) {
    return {{"lr", o.lr()},
            {"alpha", o.alpha()},
            {"eps", o.eps()},
            {"weight_decay", o.weight_decay()},
            {"momentum", o.momentum()},
            {"centered", o.centered()}};
  }
  static void from_json(const json& j, Options& o) {
    o.lr(j.at("lr").get<double>())
        .alpha(j.at("alpha").get<double>())
        .eps(j.at("eps").get<double>())
        .weight_decay(j.at("weight_decay").get<double>())
        .momentum(j.at("momentum").get<double>())
        .centered(j.at("centered").get<bool>());
  }
};

struct LarsTraits {
  using Optimizer = optim::Lars;
  using Options = optim::LarsOptions;
  using State = optim::LarsParamState;
  static constexpr const char* kKind = "LARS";
  static constexpr bool kHasStep = false;
  static std::vector<TensorField<State>> fields() {
    return {COHORT_STATE_FIELD(State, momentum_buffer)};
  }
  static json to_json(const Options& o) {
    return {{"lr", o.lr()},
            {"momentum", o.momentum()},
            {"nesterov", o.nesterov()},
            {"weight_decay", o.weight_decay()},
            {"trust_coefficient", o.trust_coefficient()},
            {"eps", o.eps()},
            {"adapt", o.adapt()}};
  }
  static void from_json(const json& j, Options& o) {
    o.lr(j.at("lr").get<double>())
        .momentum(j.at("momentum").get<double>())
        .nesterov(j.at("nesterov").get<bool>())
        .weight_decay(j.at("weight_decay").get<double>())
        .trust_coefficient(j.at("trust_coefficient").get<double>())
        .eps(j.at("eps").get<double>())
        .adapt(j.at("adapt").get<bool>());
  }
};

// JSON has no infinity: LAMB's unclipped trust_clip is written as null.
json finite_or_null(double value) {
  return std::isinf(value) ? json(nullptr) : json(value);
}

struct LambTraits {
  using Optimizer = optim::Lamb;
  using Options = optim::LambOptions;
  using State = optim::LambParamState;
  static constexpr const char* kKind = "LAMB";
  static constexpr bool kHasStep = true;
  static std::vector<TensorField<State>> fields() {
    return {COHORT_STATE_FIELD(State, exp_avg), COHORT_STATE_FIELD(State, exp_avg_sq)};
  }
  static json to_json(const Options& o) {
    return {{"lr", o.lr()},
            {"betas", {std::get<0>(o.betas()), std::get<1>(o.betas())}},
            {"eps", o.eps()},
            {"weight_decay", o.weight_decay()},
            {"trust_clip", finite_or_null(o.trust_clip())},
            {"adapt", o.adapt()}};
  }
  static void from_json(const json& j, Options& o) {
    const auto& betas = j.at("betas");
    const auto& clip = j.at("trust_clip");
    o.lr(j.at("lr").get<double>())
        .betas(std::make_tuple(betas.at(0).get<double>(), betas.at(1).get<double>()))
        .eps(j.at("eps").get<double>())
        .weight_decay(j.at("weight_decay").get<double>())
        .trust_clip(clip.is_null() ? std::numeric_limits<double>::infinity() : clip.get<double>())
        .adapt(j.at("adapt").get<bool>());
  }
};

#undef COHORT_STATE_FIELD

const std::vector<const OptimizerCodec*>& codecs() {
  static const Codec<SgdTraits> sgd;
  static const Codec<AdamTraits> adam;
  static const Codec<AdamWTraits> adamw;
  static const Codec<AdagradTraits> adagrad;
  static const Codec<RmspropTraits> rmsprop;
  static const Codec<LarsTraits> lars;
  static const Codec<LambTraits> lamb;
  static const std::vector<const OptimizerCodec*> all = {&sgd,     &adam, &adamw, &adagrad,
                                                         &rmsprop, &lars, &lamb};
  return all;
}

}  // namespace

const OptimizerCodec* codec_of(const torch::optim::Optimizer& optimizer) {
  for (const OptimizerCodec* codec : codecs()) {
    if (codec->matches(optimizer)) return codec;
  }
  return nullptr;
}

const OptimizerCodec* codec_named(const std::string& kind) {
  for (const OptimizerCodec* codec : codecs()) {
    if (kind == codec->kind()) return codec;
  }
  return nullptr;
}

const char* known_optimizers() {
  return "SGD, Adam, AdamW, Adagrad, RMSprop, LARS and LAMB";
}

const OptimizerParamState* state_of(const torch::optim::Optimizer& optimizer,
                                    const torch::Tensor& tensor) {
  const auto& state = optimizer.state();
  using Key = typename std::decay_t<decltype(state)>::key_type;
  const auto it = state.find(optim::detail::state_key<Key>(tensor));
  return it == state.end() ? nullptr : it->second.get();
}

void set_state_of(torch::optim::Optimizer& optimizer, const torch::Tensor& tensor,
                  std::unique_ptr<OptimizerParamState> value) {
  auto& state = optimizer.state();
  using Key = typename std::decay_t<decltype(state)>::key_type;
  if (value) {
    state[optim::detail::state_key<Key>(tensor)] = std::move(value);
  } else {
    state.erase(optim::detail::state_key<Key>(tensor));
  }
}

}  // namespace cohort::detail
